#include "launcher/role_supervisor.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "common/checkpoint/checkpoint_store.h"
#include "common/duration_text.h"
#include "common/logging.h"
#include "common/role_signals.h"
#include "common/run_directory_identity.h"
#include "launcher/exit_codes.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

// SIGINT, SIGTERM and SIGHUP seen by this supervisor: the first stops the job in order, a second
// one kills what is still running. The first one's number decides the exit status.
std::atomic<int> g_interrupts{0};    // NOLINT: a signal handler can reach nothing else.
std::atomic<int> g_first_signal{0};  // NOLINT: as above.
// A role reported a stop signal of another sender (TakeForeignStop): the job stops in order too.
std::atomic<bool> g_foreign_stop{false};  // NOLINT: as above.
void OnInterrupt(int signal) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, signal);
  g_interrupts.fetch_add(1);
}
// kOrderlyStopSignal asks for the orderly stop and nothing more: a second one does not kill.
void OnOrderlyStop(int signal) {
  int none = 0;
  if (g_first_signal.compare_exchange_strong(none, signal)) g_interrupts.fetch_add(1);
}
// A kOrderlyStopSignal that came before SuperviseRoles began (KeepOrderlyStopUntilSupervision).
std::atomic<bool> g_stop_before_supervision{false};  // NOLINT: as above.
void OnOrderlyStopBeforeSupervision(int) { g_stop_before_supervision.store(true); }

// Set once SuperviseRoles found its run directory removed or replaced (RunDirectoryWasLost).
std::atomic<bool> g_run_directory_lost{false};

// Ctrl-Z (SIGTSTP) asked this supervisor to stop: it pauses its roles first (PauseJobIfAsked).
std::atomic<bool> g_pause_asked{false};  // NOLINT: a signal handler can reach nothing else.
void OnTerminalStop(int) { g_pause_asked.store(true); }
// SIGCONT: this process was stopped, by its own pause or by a SIGSTOP it could not see coming.
std::atomic<bool> g_continued{false};  // NOLINT: as above.
void OnContinue(int) { g_continued.store(true); }

// Job control while SuperviseRoles runs: Ctrl-Z stops the whole job, not this process alone
// (roles run in process groups of their own, out of the terminal's reach), and `fg` or `bg`
// continues all of it. Restores the default actions when supervision ends.
class JobControl {
 public:
  JobControl() {
    g_pause_asked.store(false);
    g_continued.store(false);
    signal(SIGTSTP, OnTerminalStop);
    signal(SIGCONT, OnContinue);
  }
  ~JobControl() {
    signal(SIGTSTP, SIG_DFL);
    signal(SIGCONT, SIG_DFL);
  }
  JobControl(const JobControl&) = delete;
  JobControl& operator=(const JobControl&) = delete;
};

// After Ctrl-Z: stops every role (SIGSTOP to its process group), then this process (SIGTSTP's
// default action, so that the shell sees the job stopped); once continued, continues the roles.
// Returns how long the job was paused (zero when nothing asked, or when the kernel discarded the
// stop, as it does for a process group no shell controls). A SIGCONT without a pause of ours
// (this process alone was stopped, `kill -STOP`) forgives the roles the heartbeats it missed.
std::chrono::steady_clock::duration PauseJobIfAsked(std::vector<SupervisedRole>& roles) {
  if (g_continued.exchange(false)) {
    for (auto& role : roles) role.process->ForgetSilence();
  }
  if (!g_pause_asked.exchange(false)) return {};
  for (auto& role : roles) role.process->Pause();
  PSF_LOG(Warning) << "stopped (SIGTSTP): every role process is paused until this supervisor continues";
  std::cerr << "psformer train: paused (Ctrl-Z): every role process of the job is stopped; fg or bg continues it\n"
            << std::flush;
  const auto paused_at = std::chrono::steady_clock::now();
  signal(SIGTSTP, SIG_DFL);
  raise(SIGTSTP);  // returns once continued
  signal(SIGTSTP, OnTerminalStop);
  for (auto& role : roles) role.process->Continue();
  g_continued.store(false);
  const auto paused = std::chrono::steady_clock::now() - paused_at;
  const std::string after = DurationText(std::chrono::duration<double>(paused).count());
  PSF_LOG(Warning) << "continued after " << after << "; every role process continues";
  std::cerr << "psformer train: continued after " << after << "\n";
  return paused;
}

// Stops the roles of `kind` (SupervisorStopSignal()) while the others stay supervised, waiting at most `timeout`
// (or until another Ctrl-C) before killing the rest. True when every one of them exited 0.
bool StopRoles(std::vector<SupervisedRole>& roles, RoleSlot::Kind kind, std::chrono::seconds timeout) {
  // At least one: in a stop a role's report began, this process's own first signal (the same
  // pkill's, a moment later) is no second one.
  const int interrupts = std::max(g_interrupts.load(), 1);
  for (auto& role : roles) {
    if (role.kind == kind) role.process->RequestStop(SupervisorStopSignal());
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    deadline += PauseJobIfAsked(roles);  // a pause is no time the roles had to stop
    bool all_finished = true;
    for (auto& role : roles) {
      role.process->Poll();
      if (role.kind == kind) all_finished = all_finished && role.process->finished();
    }
    if (all_finished) break;
    const bool again = g_interrupts.load() > interrupts;
    if (again || std::chrono::steady_clock::now() >= deadline) {
      for (auto& role : roles) {
        if (role.kind != kind || role.process->finished()) continue;
        PSF_LOG(Warning) << role.process->name()
                         << (again ? ": interrupted again while it stopped; killing it"
                                   : " did not stop in time; killing it");
        role.process->Kill();
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bool clean = true;
  for (auto& role : roles) {
    if (role.kind == kind) clean = clean && role.process->state() == RoleProcess::State::kSucceeded;
  }
  return clean;
}

// The orderly stop of every role: workers first (then `after_workers_stopped`), then servers,
// which write a checkpoint of the step the workers stopped after.
int StopInOrder(std::vector<SupervisedRole>& roles, const std::function<void()>& after_workers_stopped) {
  const bool hangup = g_first_signal.load() == SIGHUP;
  const char* why = hangup ? "hung up (SIGHUP: the terminal closed)" : "interrupted";
  PSF_LOG(Warning) << why << "; stopping the workers after their current step, then the servers";
  std::cerr << "psformer train: " << why
            << "; workers finish their step, then servers write a checkpoint (interrupt again to kill at once)\n";
  const bool workers_clean = StopRoles(roles, RoleSlot::Kind::kWorker, kWorkerStopTimeout);
  if (after_workers_stopped) after_workers_stopped();
  // Aggregators hold nothing a checkpoint needs: they go once every worker has (a group's other
  // workers may be ranks of their own, still finishing their step through it).
  const bool aggregators_clean = StopRoles(roles, RoleSlot::Kind::kAggregator, kServerStopTimeout);
  const bool servers_clean = StopRoles(roles, RoleSlot::Kind::kServer, kServerStopTimeout);
  if (!workers_clean || !aggregators_clean || !servers_clean) {
    // What there is to continue from, if anything, is said last (job_runner.cc).
    if (g_interrupts.load() > 1) {
      std::cerr << "psformer train: warning: interrupted again: the role processes still stopping were killed, "
                   "and this stop's checkpoint may not have been written\n";
    } else {
      std::cerr << "psformer train: warning: not every role process stopped cleanly (see the run's logs/)\n";
    }
  }
  return hangup ? kExitHangup : kExitInterrupted;
}

// Says each checkpoint failure a role reported on the console (not in the role's log alone: a
// crash later would lose everything since the last checkpoint); returns how many there were.
int ReportCheckpointFailures(std::vector<SupervisedRole>& roles) {
  int failures = 0;
  for (auto& role : roles) {
    for (const std::string& failure : role.process->TakeCheckpointFailures()) {
      std::cerr << "psformer train: warning: " << failure << "\n";
      ++failures;
    }
  }
  return failures;
}

// A stop signal that reached one of the roles from another sender than this supervisor (pkill,
// a batch system signalling every process of the job): the job stops in order, as if this
// supervisor had been signalled. True when one was reported; the first one's number then
// decides the exit status, as a signal of this process's own would.
bool TakeForeignStop(std::vector<SupervisedRole>& roles) {
  bool stop = false;
  for (auto& role : roles) {
    const std::optional<RoleProcess::ForeignSignal> signalled = role.process->TakeForeignSignal();
    if (!signalled || stop) continue;
    const char* name = strsignal(signalled->signal);
    PSF_LOG(Warning) << role.process->name() << " got signal " << signalled->signal << " ("
                     << (name != nullptr ? name : "unknown") << ") from "
                     << (signalled->sender > 0 ? "pid " + std::to_string(signalled->sender) : std::string("the kernel"))
                     << ", not from its supervisor: the whole job stops in order, as on Ctrl-C";
    int none = 0;
    g_first_signal.compare_exchange_strong(none, signalled->signal == SIGHUP ? SIGHUP : SIGINT);
    g_foreign_stop.store(true);
    stop = true;
  }
  return stop;
}

// Whether every worker of the job has finished: this process's (vacuously where it has none)
// and, through the hook, every other rank's.
bool EveryWorkerFinished(const std::vector<SupervisedRole>& roles, const SupervisionHooks& hooks) {
  bool mine = true;
  for (const auto& role : roles) {
    if (role.kind == RoleSlot::Kind::kWorker) mine = mine && role.process->state() == RoleProcess::State::kSucceeded;
  }
  return hooks.every_worker_finished ? hooks.every_worker_finished(mine) : mine;
}

// Stops, in order, the servers and aggregators still running `waited` after every worker
// finished. Training is over and the model written; such a server never heard the coordinator
// end the job (it was restarted as the job ended, or every SHUTDOWN to it was lost), and would
// wait for its workers for ever.
void StopRolesThatOutlivedTheWorkers(std::vector<SupervisedRole>& roles, std::chrono::milliseconds waited) {
  for (auto& role : roles) {
    if (role.kind == RoleSlot::Kind::kWorker || role.process->finished()) continue;
    const std::string outlived = role.process->name() + " was still running " + std::to_string(waited.count() / 1000) +
                                 " s after every worker finished (it never heard that the job ended); stopping it";
    PSF_LOG(Warning) << outlived;
    std::cerr << "psformer train: warning: " << outlived << "\n";
  }
  StopRoles(roles, RoleSlot::Kind::kAggregator, kServerStopTimeout);
  StopRoles(roles, RoleSlot::Kind::kServer, kServerStopTimeout);
}

// Shows the progress lines the roles reported (the coordinator's) on this supervisor's console
// and in its log: a user who started the job sees it train, not only its roles start and end.
void ShowProgress(std::vector<SupervisedRole>& roles) {
  for (auto& role : roles) {
    for (const std::string& line : role.process->TakeProgress()) PSF_LOG(Info) << role.process->name() << ": " << line;
  }
}

// Notes each restart a role's supervisor decided in TensorBoard (the logs have them already).
void NoteRestarts(std::vector<SupervisedRole>& roles, SupervisorEvents* events) {
  for (auto& role : roles) {
    for (const std::string& restart : role.process->TakeRestarts()) events->Note(restart);
  }
}

}  // namespace

namespace {
// Blocks (SIG_BLOCK) or unblocks (SIG_UNBLOCK) kOrderlyStopSignal in the calling thread.
void MaskOrderlyStopSignal(int how) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, kOrderlyStopSignal);
  pthread_sigmask(how, &set, nullptr);
}
}  // namespace

void HoldOrderlyStopSignal() { MaskOrderlyStopSignal(SIG_BLOCK); }

void KeepOrderlyStopUntilSupervision() {
  signal(kOrderlyStopSignal, OnOrderlyStopBeforeSupervision);
  MaskOrderlyStopSignal(SIG_UNBLOCK);
}

bool RunDirectoryWasLost() { return g_run_directory_lost.load(); }

std::string NewestCompleteCheckpoint(const std::string& run_dir) {
  const std::optional<int64_t> step = NewestCompleteCheckpointStep(run_dir);
  return step ? CheckpointDir(run_dir, *step) : "";
}

int SuperviseRoles(std::vector<SupervisedRole>& roles, const std::string& run_dir, SupervisorEvents* events,
                   const SupervisionHooks& hooks) {
  g_interrupts.store(0);
  g_first_signal.store(0);
  g_foreign_stop.store(false);
  g_run_directory_lost.store(false);
  // Removed, renamed, or replaced by another of the same name (`rm -rf RUN; psformer train
  // --run-dir RUN` while this job still runs), the directory is no longer this job's: its roles
  // would write their checkpoints and model into another job's directory, and its servers, whose
  // workers' last messages went to the sockets of that job, would wait for them for ever.
  const RunDirectoryIdentity identity(run_dir);
  const JobControl job_control;
  signal(SIGINT, OnInterrupt);
  signal(SIGTERM, OnInterrupt);
  signal(SIGHUP, OnInterrupt);
  signal(kOrderlyStopSignal, OnOrderlyStop);
  if (g_stop_before_supervision.exchange(false)) OnOrderlyStop(kOrderlyStopSignal);
  for (auto& role : roles) {
    const Status started = role.process->Start();
    if (!started.ok()) {
      PSF_LOG(Error) << role.process->name() << ": " << started.message();
      return kExitFailure;
    }
  }
  int checkpoint_failures = 0;
  std::optional<std::chrono::steady_clock::time_point> workers_finished_at;
  bool outliving_roles_stopped = false;
  while (true) {
    const auto paused = PauseJobIfAsked(roles);
    if (workers_finished_at) *workers_finished_at += paused;  // servers had no time to hear the end
    if (const RunDirectoryIdentity::Change change = identity.Look(); change != RunDirectoryIdentity::Change::kNone) {
      for (auto& role : roles) role.process->Kill();
      const std::string lost =
          "the run directory " + run_dir + " " + RunDirectoryIdentity::Describe(change) +
          " while the job ran; its role processes were killed at once, so that nothing more of this job is written "
          "under that name" +
          (change == RunDirectoryIdentity::Change::kRemoved
               ? " (a directory that was moved continues with --resume --run-dir WHERE_IT_IS_NOW)"
               : "");
      g_run_directory_lost.store(true);
      PSF_LOG(Error) << lost;
      std::cerr << "psformer train: error: " << lost << "\n";
      return kExitFailure;
    }
    checkpoint_failures += ReportCheckpointFailures(roles);
    ShowProgress(roles);
    NoteRestarts(roles, events);
    if (g_interrupts.load() != 0 || g_foreign_stop.load()) {
      if (hooks.stop_began) hooks.stop_began(g_first_signal.load() == SIGHUP ? SIGHUP : SIGINT);
      return StopInOrder(roles, hooks.after_workers_stopped);
    }
    if (const int signal = hooks.stop_asked ? hooks.stop_asked() : 0; signal != 0) {
      int none = 0;
      g_first_signal.compare_exchange_strong(none, signal);
      return StopInOrder(roles, hooks.after_workers_stopped);
    }
    bool all_done = true;
    for (auto& role : roles) {
      const RoleProcess::State state = role.process->Poll();
      if (state == RoleProcess::State::kFailed) {
        std::cerr << "psformer train: error: " << role.process->failure() << "\n";
        for (auto& other : roles) other.process->Kill();
        return kExitFailure;
      }
      all_done = all_done && state == RoleProcess::State::kSucceeded;
    }
    if (TakeForeignStop(roles)) continue;  // stopped in order at the top of the loop
    // Asked before an ending below: every rank says its workers finished (cluster mode).
    const auto now = std::chrono::steady_clock::now();
    if (!workers_finished_at && EveryWorkerFinished(roles, hooks)) workers_finished_at = now;
    if (all_done) {
      if (hooks.after_all_finished) hooks.after_all_finished();
      checkpoint_failures += ReportCheckpointFailures(roles);
      ShowProgress(roles);
      if (checkpoint_failures == 0) return kExitSuccess;
      // The model was written, but the run lacks checkpoints its config asked for.
      const std::string newest = NewestCompleteCheckpoint(run_dir);
      std::cerr << "psformer train: error: training finished, but " << checkpoint_failures
                << " checkpoint(s) could not be written (see above); last good checkpoint: "
                << (newest.empty() ? "none" : newest) << "\n";
      return kExitFailure;
    }
    if (workers_finished_at && !outliving_roles_stopped &&
        now - *workers_finished_at >= hooks.servers_outliving_workers) {
      outliving_roles_stopped = true;
      StopRolesThatOutlivedTheWorkers(roles, hooks.servers_outliving_workers);
      continue;  // they finished: the job ends as it would have
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace psformer
