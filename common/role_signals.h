// How a role process (worker, pserver, aggregator) takes SIGINT, SIGTERM and SIGHUP.
//
// Its supervisor stops a job in order: workers first (each finishes its step, its push held by
// every shard), then aggregators, then servers, which write a checkpoint of that step. A signal
// that reaches the roles from elsewhere, all at once (`pkill psformer`, a batch system's SIGTERM
// to every process of the job, systemd stopping its unit) or to one of them, would stop them out
// of that order: a server that stops while its workers' step is half pushed can write no
// checkpoint, and workers wait for servers already gone. So a supervised role acts only on its
// supervisor's signals; another sender's is reported to the supervisor (kReportSignalled, by
// the heartbeat thread), which stops the whole job in order, as its own Ctrl-C would. A role
// started by hand (no PSFORMER_HEARTBEAT_FD) acts on any sender's. One the process sends itself
// (a library in distress) takes the signal's default action.
//
// The supervisor asks with a signal of its own, SupervisorStopSignal(), not SIGTERM: a standard
// signal already pending is not queued again, so a supervisor's SIGTERM that came while another
// sender's was still pending (pkill signals the supervisor and its roles at once, and a busy role
// may not run in between) would be lost in it, and the role would never stop. A real-time signal
// is queued one for one, each with its sender.
#ifndef PSFORMER_COMMON_ROLE_SIGNALS_H_
#define PSFORMER_COMMON_ROLE_SIGNALS_H_

#include <initializer_list>
#include <string>

namespace psformer {

// What a stop signal does to the role; called in the signal handler, so async-signal-safe
// (an atomic store).
using StopSignalAction = void (*)(int signal);

// The signal a supervisor asks its roles to stop with: a real-time one (SIGRTMIN + 3).
int SupervisorStopSignal();

// Installs the handler for `signals` (of SIGINT, SIGTERM, SIGHUP) and SupervisorStopSignal() as
// above, and unblocks them in the calling thread: a supervisor starts its roles with them blocked,
// so that one sent before the handler was there waits for it. Call it from the main thread before
// it starts others, or know that threads started earlier keep them blocked.
void InstallRoleStopSignals(StopSignalAction action, std::initializer_list<int> signals);

// The report of the first stop signal from another sender not yet reported ("15 4242": the
// signal's number and its sender's pid, 0 for the kernel), or "" when there is none. Each
// signal is reported once.
std::string TakeForeignStopSignalReport();

}  // namespace psformer

#endif  // PSFORMER_COMMON_ROLE_SIGNALS_H_
