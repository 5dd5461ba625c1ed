#include "common/role_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace psformer {
namespace {

// A signal handler can reach nothing else. NOLINTBEGIN
std::atomic<StopSignalAction> g_action{nullptr};
std::atomic<pid_t> g_supervisor{0};  // 0: not supervised, every sender's signal acts
std::atomic<int> g_foreign_signal{0};
std::atomic<pid_t> g_foreign_sender{0};
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
  int none = 0;
  if (g_foreign_signal.compare_exchange_strong(none, signal)) g_foreign_sender.store(sender);
}

}  // namespace

void InstallRoleStopSignals(StopSignalAction action, std::initializer_list<int> signals) {
  g_action.store(action);
  const char* fd = std::getenv("PSFORMER_HEARTBEAT_FD");
  // The supervisor forked this process: its parent, as long as that lives (PR_SET_PDEATHSIG).
  g_supervisor.store(fd != nullptr && std::atoi(fd) >= 0 ? getppid() : 0);
  struct sigaction sa {};
  sa.sa_sigaction = OnStopSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (const int signal : signals) sigaction(signal, &sa, nullptr);
}

std::string TakeForeignStopSignalReport() {
  const int signal = g_foreign_signal.load();
  if (signal <= 0) return "";
  const pid_t sender = g_foreign_sender.load();
  g_foreign_signal.store(-1);  // reported; later ones too are the job's stop, already asked for
  return std::to_string(signal) + " " + std::to_string(sender);
}

}  // namespace psformer
