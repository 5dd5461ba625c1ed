// Reads what a line of a supervisor's log (logs/supervisor.log, logs/supervisor-R.log) says about
// a role process, for `psformer status`: "[...] worker-1: started pid 4242 (incarnation 0)",
// "... pserver-0 finished", "... worker-1: killed by signal 9; restarting in 200 ms as
// incarnation 1". One pass over the line, no recursion or backtracking: a line of any length and
// content costs time linear in it, and one that says nothing about a role is answered as such.
#ifndef PSFORMER_LAUNCHER_SUPERVISOR_LOG_H_
#define PSFORMER_LAUNCHER_SUPERVISOR_LOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace psformer {

struct RoleLogEvent {
  enum class Kind {
    kOther,       // a line about the role that changes nothing status shows
    kStarted,     // "started pid P (incarnation I)"
    kFinished,    // "finished"
    kRestarting,  // "HOW IT ENDED; restarting in N ms as incarnation I"
    kFailed,      // it used up cluster.max_restarts, or would not stop
  };
  Kind kind = Kind::kOther;
  std::string role;     // "worker-0", "pserver-1"
  int64_t pid = -1;     // kStarted
  int incarnation = 0;  // kStarted
  std::string detail;   // kRestarting: how the incarnation ended; kFailed: the whole message
};

// The event of `line`, or nothing when the line names no role process ("] worker-N" or
// "] pserver-N", an optional ':', then a space). Numbers too large for their fields make a
// kOther event, not a failure.
std::optional<RoleLogEvent> ParseSupervisorLogLine(std::string_view line);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_SUPERVISOR_LOG_H_
