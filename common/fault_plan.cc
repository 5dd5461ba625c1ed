#include "common/fault_plan.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "common/logging.h"

namespace psformer {
namespace {

// The roles and the kill actions of fault.kill entries, by the word an entry names them with.
constexpr std::pair<const char*, FaultEvent::Role> kRoleWords[] = {
    {"worker", FaultEvent::WORKER}, {"server", FaultEvent::SERVER}, {"aggregator", FaultEvent::AGGREGATOR}};
constexpr std::pair<const char*, FaultEvent::Action> kKillWords[] = {{"kill", FaultEvent::KILL},
                                                                     {"checkpoint", FaultEvent::KILL_IN_CHECKPOINT},
                                                                     {"push", FaultEvent::KILL_IN_PUSH},
                                                                     {"shm", FaultEvent::KILL_IN_SHM}};

// What `word` names in `words`, or nullopt.
template <typename T, size_t N>
std::optional<T> Lookup(const std::pair<const char*, T> (&words)[N], const std::string& word) {
  for (const auto& [name, value] : words) {
    if (word == name) return value;
  }
  return std::nullopt;
}

}  // namespace

StatusOr<std::vector<std::string>> RestartEnvironment(const proto::FaultConfig& fault) {
  std::vector<std::string> entries;
  std::stringstream in(fault.restart_environment());
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    const std::string name = item.substr(0, equals);
    const bool valid_name = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                            std::all_of(name.begin(), name.end(), [](char ch) {
                              return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                            });
    if (equals == std::string::npos || !valid_name) {
      return Status::InvalidArgument("fault.restart_environment = \"" + fault.restart_environment() + "\": entry '" +
                                     item + "' is not NAME=VALUE (e.g. OPENBLAS_CORETYPE=Prescott)");
    }
    entries.push_back(item);
  }
  return entries;
}

StatusOr<std::vector<FaultEvent>> FaultEvents(const proto::FaultConfig& fault) {
  std::vector<FaultEvent> events(fault.events().begin(), fault.events().end());
  std::stringstream in(fault.kill());
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t colon = item.find(':'), at = item.find('@');
    const std::string bad = "fault.kill = \"" + fault.kill() + "\": entry '" + item + "' ";
    if (colon == std::string::npos || at == std::string::npos || at < colon) {
      return Status::InvalidArgument(bad + "is not ROLE:INDEX@STEP[:ACTION] (e.g. worker:1@10)");
    }
    const std::string role = item.substr(0, colon);
    FaultEvent e;
    if (const auto named = Lookup(kRoleWords, role)) {
      e.set_role(*named);
    } else {
      return Status::InvalidArgument(bad + "names role '" + role + "'; expected worker, server or aggregator");
    }
    std::string step = item.substr(at + 1), action = "kill";
    if (const size_t c = step.find(':'); c != std::string::npos) {
      action = step.substr(c + 1);
      step = step.substr(0, c);
    }
    try {
      size_t used = 0;
      const std::string index = item.substr(colon + 1, at - colon - 1);
      e.set_index(std::stoi(index, &used));
      if (used != index.size()) throw std::invalid_argument(index);
      e.set_at_step(std::stoll(step, &used));
      if (used != step.size()) throw std::invalid_argument(step);
      if (const auto kill = Lookup(kKillWords, action)) {
        e.set_action(*kill);
      } else if (action.rfind("stall=", 0) == 0) {
        e.set_action(FaultEvent::STALL);
        const std::string ms = action.substr(6);
        e.set_stall_ms(std::stoi(ms, &used));
        if (used != ms.size() || e.stall_ms() <= 0) throw std::invalid_argument(ms);
      } else {
        return Status::InvalidArgument(bad + "names action '" + action +
                                       "'; expected kill, checkpoint, push, shm or stall=MS");
      }
    } catch (const std::exception&) {
      return Status::InvalidArgument(bad + "has a malformed index, step or stall time");
    }
    events.push_back(e);
  }
  return events;
}

FaultPlan::FaultPlan(const proto::FaultConfig& fault, FaultEvent::Role role, int index, uint32_t incarnation,
                     std::shared_ptr<ShmFaultSwitch> shm_faults)
    : role_(role), shm_faults_(shm_faults ? std::move(shm_faults) : std::make_shared<ShmFaultSwitch>()) {
  auto events = FaultEvents(fault);
  PSF_CHECK(events.ok());
  std::vector<FaultEvent> ours;
  for (const FaultEvent& e : *events) {
    if (e.role() == role && e.index() == index) ours.push_back(e);
  }
  std::stable_sort(ours.begin(), ours.end(),
                   [](const FaultEvent& a, const FaultEvent& b) { return a.at_step() < b.at_step(); });
  if (incarnation < ours.size()) mine_.push_back(ours[incarnation]);
}

void FaultPlan::KillOrStallAt(int64_t step) const {
  for (const FaultEvent& e : mine_) {
    if (e.at_step() != step) continue;
    if (e.action() == FaultEvent::KILL_IN_SHM) {
      ArmShmFault(step);
    } else if (e.action() == FaultEvent::KILL) {
      PSF_LOG(Warning) << "fault injection: killing myself (SIGKILL) at step " << step;
      kill(getpid(), SIGKILL);
    } else if (e.action() == FaultEvent::STALL) {
      PSF_LOG(Warning) << "fault injection: stopping myself (SIGSTOP) for " << e.stall_ms() << " ms at step " << step;
      // A child wakes the whole process (every thread, heartbeats included, is stopped) unless
      // the supervisor has killed it by then.
      const pid_t self = getpid();
      const pid_t waker = fork();
      if (waker == 0) {
        // The waker holds none of the process's sockets (a killed server's port must come free)
        // and dies with it.
        close_range(3, ~0U, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != self) _exit(0);
        const timespec pause{e.stall_ms() / 1000, (e.stall_ms() % 1000) * 1000000L};
        nanosleep(&pause, nullptr);
        kill(self, SIGCONT);
        _exit(0);
      }
      if (waker > 0) {
        kill(self, SIGSTOP);
        waitpid(waker, nullptr, 0);
      }
      PSF_LOG(Warning) << "fault injection: continuing after the stall";
    }
  }
}

bool FaultPlan::WillKillOrStallAt(int64_t step) const {
  return std::any_of(mine_.begin(), mine_.end(), [&](const FaultEvent& e) {
    return e.at_step() == step && (e.action() == FaultEvent::KILL || e.action() == FaultEvent::STALL);
  });
}

void FaultPlan::KillDuringPush(int64_t step) const {
  for (const FaultEvent& e : mine_) {
    if (e.at_step() == step && e.action() == FaultEvent::KILL_IN_PUSH) {
      PSF_LOG(Warning) << "fault injection: killing myself (SIGKILL) halfway through the push of step " << step;
      kill(getpid(), SIGKILL);
    }
    // With overlap, half of the step's pieces have gone by now: the kill lands in a copy of the rest.
    if (e.at_step() == step && e.action() == FaultEvent::KILL_IN_SHM) ArmShmFault(step);
  }
}

void FaultPlan::ArmShmFault(int64_t step) const {
  ShmFault fault;
  fault.point = role_ == FaultEvent::WORKER ? ShmFault::kHalfwayThroughCopy : ShmFault::kOnceAReaderClaims;
  fault.step = static_cast<int32_t>(step);
  shm_faults_->Arm(fault);
}

void FaultPlan::KillDuringCheckpoint(int64_t step) const {
  for (const FaultEvent& e : mine_) {
    if (e.at_step() == step && e.action() == FaultEvent::KILL_IN_CHECKPOINT) {
      PSF_LOG(Warning) << "fault injection: killing myself (SIGKILL) while writing the checkpoint of step " << step;
      kill(getpid(), SIGKILL);
    }
  }
}

}  // namespace psformer
