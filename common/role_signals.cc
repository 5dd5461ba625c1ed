#include "common/role_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace psformer {
namespace {

// A signal handler can reach nothing else. NOLINTBEGIN
std::atomic<StopSignalAction> g_action{nullptr};
std::atomic<pid_t> g_supervisor{0};  // 0: not supervised, every sender's signal acts
// The first foreign stop signal not yet reported, with its sender: signal << 32 | sender, one
// word so that the reporter never reads one without the other; kReported once reported.
std::atomic<uint64_t> g_foreign{0};
constexpr uint64_t kReported = ~uint64_t{0};
// NOLINTEND

void OnStopSignal(int signal, siginfo_t* info, void*) {
  const pid_t sender = info != nullptr && info->si_code <= 0 ? info->si_pid : 0;  // 0: the kernel's
  if (sender == getpid()) {
    ::signal(signal, SIG_DFL);
    raise(signal);
    return;
  }
  const pid_t supervisor = g_supervisor.load();
  if (supervisor == 0 || sender == supervisor) {
    if (const StopSignalAction action = g_action.load()) action(signal);
    return;
  }
  uint64_t none = 0;
  g_foreign.compare_exchange_strong(none, static_cast<uint64_t>(signal) << 32 | static_cast<uint32_t>(sender));
}

}  // namespace

int SupervisorStopSignal() { return SIGRTMIN + 3; }

void InstallRoleStopSignals(StopSignalAction action, std::initializer_list<int> signals) {
  g_action.store(action);
  const char* fd = std::getenv("PSFORMER_HEARTBEAT_FD");
  // The supervisor forked this process: its parent, as long as that lives (PR_SET_PDEATHSIG).
  g_supervisor.store(fd != nullptr && std::atoi(fd) >= 0 ? getppid() : 0);
  struct sigaction sa {};
  sa.sa_sigaction = OnStopSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigset_t handled;
  sigemptyset(&handled);
  for (const int signal : signals) {
    sigaction(signal, &sa, nullptr);
    sigaddset(&handled, signal);
  }
  sigaction(SupervisorStopSignal(), &sa, nullptr);
  sigaddset(&handled, SupervisorStopSignal());
  // A supervisor starts its roles with these blocked (launcher/role_process.cc): one that came
  // before now is delivered here, to the handler.
  pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);
}

std::string TakeForeignStopSignalReport() {
  uint64_t foreign = g_foreign.load();
  // Reported once: later ones too are the job's stop, already asked for.
  if (foreign == 0 || foreign == kReported || !g_foreign.compare_exchange_strong(foreign, kReported)) return "";
  return std::to_string(foreign >> 32) + " " + std::to_string(static_cast<uint32_t>(foreign));
}

}  // namespace psformer
