// Supervision of a job's role processes until the job ends (docs/failure-model.md): each
// RoleProcess restarts its own child; this loop watches them all, says checkpoint failures on the
// console as they come, ends the job when one fails for good, and turns Ctrl-C / SIGTERM into an
// orderly stop: the workers finish the step in hand, then the servers write a checkpoint of it.
#ifndef PSFORMER_LAUNCHER_ROLE_SUPERVISOR_H_
#define PSFORMER_LAUNCHER_ROLE_SUPERVISOR_H_

#include <signal.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/cluster_plan.h"
#include "launcher/role_process.h"
#include "launcher/supervisor_events.h"

namespace psformer {

// How long a stop waits for the workers to finish their step, and then for the servers to write
// their checkpoint, before it kills what is left.
inline constexpr std::chrono::seconds kWorkerStopTimeout{60};
inline constexpr std::chrono::seconds kServerStopTimeout{60};
// How long servers and aggregators may run on once every worker of the job has finished. A
// server stops by itself at most 60 s after the coordinator ended the job (kServerFinishDeadline,
// pserver/timing.h), which is before the last worker exits; one still running twice that long
// after never heard the job end (restarted as it ended, say) and would wait for ever.
inline constexpr std::chrono::seconds kServersOutliveWorkersTimeout{120};

// What a supervision shares with the supervisors of the job's other ranks (cluster mode); each
// is optional.
struct SupervisionHooks {
  // Waits, once this process's workers have stopped, until every rank's have, so that the
  // servers of the whole job stop after all of them.
  std::function<void()> after_workers_stopped;
  // Called once every role finished, with nothing stopped: the same wait, unbounded, so that
  // every rank makes the same MPI collectives whichever way it ended (a stop that came as the
  // job finished reaches some ranks and not others).
  std::function<void()> after_all_finished;
  // Called when this process begins an orderly stop of its own accord (a signal to it, or one a
  // role reported), with its first signal (SIGINT or SIGHUP): the other ranks are told.
  std::function<void(int signal)> stop_began;
  // Polled while the roles run: the signal (SIGINT or SIGHUP) with which another rank began an
  // orderly stop, once the hook has logged which rank; 0 if none. This process then stops in
  // order too.
  std::function<int()> stop_asked;
  // Polled while the roles run, with whether every worker of this process has finished (true
  // where it has none): whether every worker of the whole job has. Without it, this process's
  // workers are the job's.
  std::function<bool(bool mine_finished)> every_worker_finished;
  // Servers and aggregators still running this long after every worker of the job finished are
  // stopped in order, with a warning: the job ends instead of waiting on them for ever.
  std::chrono::milliseconds servers_outliving_workers = kServersOutliveWorkersTimeout;
};

// A role process and what it is, so that a stop can go in order.
struct SupervisedRole {
  RoleSlot::Kind kind;
  std::unique_ptr<RoleProcess> process;
};

// SIGUSR1 asks a supervisor for the orderly stop as Ctrl-C does, and a second one does not kill.
// mpirun answers Ctrl-C and SIGTERM by killing its ranks a second later, which is too soon for a
// large model's step and checkpoint; SIGUSR1 it passes on to every rank, and then waits for them.
// So `psformer launch` stops a job with it, and so can a user of a bare mpirun (docs/launching.md).
inline constexpr int kOrderlyStopSignal = SIGUSR1;

// Blocks kOrderlyStopSignal, so that one that comes while this process starts waits for
// KeepOrderlyStopUntilSupervision (a blocked signal stays blocked through an exec; a handler
// does not). Under mpirun, the first thing main does.
void HoldOrderlyStopSignal();

// Keeps a kOrderlyStopSignal that comes before SuperviseRoles begins (its default action would
// end this process, and under mpirun the job with it), and unblocks it: supervision then starts
// with the stop.
void KeepOrderlyStopUntilSupervision();

// Starts the roles and polls them until every one finished: kExitSuccess, or kExitFailure when
// checkpoints failed on the way (the newest complete one of `run_dir` is named). Servers and
// aggregators that outlive every worker by `servers_outliving_workers` are stopped in order on
// the way, and their exits decide as any role's. One role failed for good: kExitFailure, the
// others killed. The run directory removed, renamed or replaced: kExitFailure, every role killed
// at once (RunDirectoryWasLost). Ctrl-C, SIGTERM or kOrderlyStopSignal: kExitInterrupted after
// the orderly stop; SIGHUP (the terminal closed): the same stop and kExitHangup (then a SIGINT,
// SIGTERM or SIGHUP kills what is still running). Each restart a role's supervisor decides is
// noted in `events` (TensorBoard).
// REQUIRES: one call at a time in a process (it installs SIGINT, SIGTERM, SIGHUP and SIGUSR1
// handlers).
int SuperviseRoles(std::vector<SupervisedRole>& roles, const std::string& run_dir, SupervisorEvents* events,
                   const SupervisionHooks& hooks = {});

// Whether the last SuperviseRoles ended because its run directory was removed, renamed or
// replaced while the job ran (its roles killed, kExitFailure): what is at that path now is not
// this job's, and nothing may be written, restored or removed there by path.
bool RunDirectoryWasLost();

// The newest checkpoint of the run that is complete (CheckCheckpointFiles), as a path; "" if none.
std::string NewestCompleteCheckpoint(const std::string& run_dir);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_ROLE_SUPERVISOR_H_
