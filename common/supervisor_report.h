// What a role process tells its supervisor besides "alive": one line at a time over the
// heartbeat pipe (common/heartbeat.h, launcher/role_process.h). Heartbeats are single bytes
// (1); a report is a line "KIND text\n" written with one write(2), which a pipe keeps whole.
//
//   ready               the role started up (bound, connected, state loaded): from now on a
//                       failure is one of running, not of its configuration
//   checkpoint-failed   a checkpoint could not be written; the text says which and why
//   fatal               why the role is about to exit with kExitDoNotRestart
//   stopped             a worker stopped on request (a stop signal) before the job's end, the text
//                       says where: exit 0 then is no finish, and where its supervisor did not
//                       ask for the stop, the worker is restarted like one that died
//   signalled           a stop signal reached the role from another sender than its supervisor
//                       ("SIGNAL PID", common/role_signals.h): the supervisor stops the whole
//                       job in order, as on its own Ctrl-C
//   progress            the coordinator's progress line (a training interval, a validation, an
//                       early stop), which the supervisor shows on the console of the job: the
//                       role's own log, where it goes too, is a file
//
// Without PSFORMER_HEARTBEAT_FD (a role started by hand) reports go nowhere.
#ifndef PSFORMER_COMMON_SUPERVISOR_REPORT_H_
#define PSFORMER_COMMON_SUPERVISOR_REPORT_H_

#include <string>
#include <string_view>

namespace psformer {

inline constexpr std::string_view kReportReady = "ready";
inline constexpr std::string_view kReportCheckpointFailed = "checkpoint-failed";
inline constexpr std::string_view kReportFatal = "fatal";
inline constexpr std::string_view kReportStopped = "stopped";
inline constexpr std::string_view kReportSignalled = "signalled";
inline constexpr std::string_view kReportProgress = "progress";

// The exit status of a role that a restart cannot help (its last report, kReportFatal, says
// why): the supervisor ends the job instead (EX_CONFIG of sysexits.h).
inline constexpr int kExitDoNotRestart = 78;

// The exit status of a role (of any psformer command) that the machine refused a thread or
// memory (std::thread's EAGAIN, std::bad_alloc): the machine is short, which a restart at once
// does not fix, so its supervisor waits for the machine instead of spending a restart
// (launcher/role_process.h; EX_TEMPFAIL of sysexits.h).
inline constexpr int kExitOutOfResources = 75;

// Sends "KIND text" to the supervisor (text cut to fit one atomic pipe write; newlines in it
// become spaces). Thread-safe; never blocks on a full pipe for long (the heartbeat pipe is
// non-blocking once a HeartbeatSender runs).
void ReportToSupervisor(std::string_view kind, std::string_view text = "");

// Whether this process sent kReportFatal: its command then exits with kExitDoNotRestart, since
// the supervisor reads the report only together with that status.
bool FatalReportSent();

}  // namespace psformer

#endif  // PSFORMER_COMMON_SUPERVISOR_REPORT_H_
