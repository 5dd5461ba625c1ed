// One run of mpirun, watched: while it runs, the job's hosts are asked every few seconds whether
// they still answer (launcher/host_probe.h). Open MPI notices a rank that exits, but not a host
// that vanishes (power, kernel panic, a cut cable): its daemon's connections then stay silent
// instead of closing, and a BSP job waits forever for that host's workers. A host silent for
// longer than the host timeout ends the run, so the launch can start it again without that host.
//
// Signals: mpirun runs in a process group of its own with stdin from /dev/null. The first SIGINT,
// SIGTERM or SIGHUP sent to this process is passed on as SIGUSR1 once the job has started, which
// mpirun passes on to every rank, who stop in order however long that takes (role_supervisor.h:
// kOrderlyStopSignal); a second one as SIGINT, on which mpirun kills the job at once. SIGUSR1
// sent to this process asks for the same orderly stop, and a second one kills nothing, as for a
// job's supervisors.
#ifndef PSFORMER_LAUNCHER_WATCHED_MPIRUN_H_
#define PSFORMER_LAUNCHER_WATCHED_MPIRUN_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "launcher/host_probe.h"

namespace psformer {

struct WatchedMpirunOptions {
  std::vector<std::string> command;  // the mpirun command line
  std::vector<std::string> hosts;    // the hosts it runs on
  HostProbeOptions probe;
  std::chrono::milliseconds probe_every{2000};
  // A host that has not answered for this long counts as lost; 0 = never (no watching).
  std::chrono::milliseconds host_timeout{30000};
  // mpirun's stdout and stderr pass through this process to its own; once its console takes no
  // more (a closed terminal, `| head`), they are appended to this file, if its directory exists.
  std::string console_gone_log;
  // Whether the job has started: every rank is past its start (rank 0 writes the run's config
  // only after every rank reached MPI). A Ctrl-C is passed on as the orderly stop only then.
  std::function<bool()> job_started;
  // A job not started this long after mpirun began (a host's daemon that never came up: an rsh
  // agent that answers the probe but hangs starting it) ends the run; 0 = wait for ever.
  std::chrono::milliseconds start_timeout{300000};
};

struct WatchedMpirunResult {
  int exit_status = 0;       // mpirun's (128 + signal when it was killed)
  bool interrupted = false;  // SIGINT, SIGTERM or SIGHUP reached this process while mpirun ran
  bool hung_up = false;      // the first of them was SIGHUP (the terminal closed)
  std::string lost_host;     // the host that stopped answering, when that ended the run
  std::string cause;         // why the run ended, in words, when it did not end with status 0
};

// Runs the command to its end. REQUIRES: one call at a time in a process (it installs SIGINT
// SIGTERM and SIGHUP handlers for its duration).
WatchedMpirunResult RunWatchedMpirun(const WatchedMpirunOptions& options);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_WATCHED_MPIRUN_H_
