#include "launcher/serve_until_signalled.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/role_signals.h"

namespace psformer {
namespace {

std::atomic<bool> g_signalled{false};  // NOLINT: a signal handler can reach nothing else.
void OnStopSignal(int) { g_signalled.store(true); }

}  // namespace

ServeOutcome ServeUntilSignalled(const std::function<Status()>& run, const std::function<void()>& stop,
                                 const std::function<void()>& tick) {
  InstallRoleStopSignals(OnStopSignal, {SIGTERM, SIGINT, SIGHUP});
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      if (g_signalled.load()) stop();
      if (tick) tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  ServeOutcome outcome;
  outcome.status = run();
  done.store(true);
  watcher.join();
  outcome.signalled = g_signalled.load();
  return outcome;
}

}  // namespace psformer
