#include "common/fault_plan.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "common/logging.h"

namespace psformer {

StatusOr<std::vector<FaultEvent>> FaultEvents(const proto::FaultConfig& fault) {
  std::vector<FaultEvent> events(fault.events().begin(), fault.events().end());
  std::stringstream in(fault.kill());
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t colon = item.find(':'), at = item.find('@');
    const std::string bad = "fault.kill = \"" + fault.kill() + "\": entry '" + item + "' ";
    if (colon == std::string::npos || at == std::string::npos || at < colon) {
      return Status::InvalidArgument(bad + "is not ROLE:INDEX@STEP (e.g. worker:1@10)");
    }
    const std::string role = item.substr(0, colon);
    FaultEvent e;
    if (role == "worker") {
      e.set_role(FaultEvent::WORKER);
    } else if (role == "server") {
      e.set_role(FaultEvent::SERVER);
    } else {
      return Status::InvalidArgument(bad + "names role '" + role + "'; expected worker or server");
    }
    try {
      size_t used = 0;
      const std::string index = item.substr(colon + 1, at - colon - 1), step = item.substr(at + 1);
      e.set_index(std::stoi(index, &used));
      if (used != index.size()) throw std::invalid_argument(index);
      e.set_at_step(std::stoll(step, &used));
      if (used != step.size()) throw std::invalid_argument(step);
    } catch (const std::exception&) {
      return Status::InvalidArgument(bad + "has a malformed index or step");
    }
    e.set_action(FaultEvent::KILL);
    events.push_back(e);
  }
  return events;
}

FaultPlan::FaultPlan(const proto::FaultConfig& fault, FaultEvent::Role role, int index, uint32_t incarnation) {
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

void FaultPlan::At(int64_t step) const {
  for (const FaultEvent& e : mine_) {
    if (e.at_step() != step) continue;
    if (e.action() == FaultEvent::KILL) {
      PSF_LOG(Warning) << "fault injection: killing myself (SIGKILL) at step " << step;
      kill(getpid(), SIGKILL);
    } else {
      PSF_LOG(Warning) << "fault injection: stalling " << e.stall_ms() << " ms at step " << step;
      std::this_thread::sleep_for(std::chrono::milliseconds(e.stall_ms()));
    }
  }
}

}  // namespace psformer
