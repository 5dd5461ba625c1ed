// How a serving role (`psformer pserver`, `psformer aggregator`) runs: its loop on this thread,
// while a watcher thread turns SIGTERM, SIGINT and SIGHUP (its supervisor's, or any sender's
// without one: common/role_signals.h) into a call of its Stop() (a signal handler itself can do
// no more than set a flag) and does the role's periodic chores.
#ifndef PSFORMER_LAUNCHER_SERVE_UNTIL_SIGNALLED_H_
#define PSFORMER_LAUNCHER_SERVE_UNTIL_SIGNALLED_H_

#include <functional>

#include "common/status.h"

namespace psformer {

struct ServeOutcome {
  Status status;           // what `run` returned
  bool signalled = false;  // SIGTERM or SIGINT came while it ran
};

// Installs the SIGTERM/SIGINT handlers, then runs `run` to its end. On the watcher thread, every
// 50 ms: `stop` once a signal has come (again on each pass until `run` returns; it must be
// idempotent), then `tick` if given. After `run` returns the watcher is joined.
ServeOutcome ServeUntilSignalled(const std::function<Status()>& run, const std::function<void()>& stop,
                                 const std::function<void()>& tick = {});

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_SERVE_UNTIL_SIGNALLED_H_
