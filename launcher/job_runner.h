// Runs a training job as supervisors of role processes (docs/architecture.md):
// single-node mode (this process supervises every role on this machine) and cluster mode (one
// MPI rank supervises one role; MPI carries only bootstrap and shutdown).
#ifndef PSFORMER_LAUNCHER_JOB_RUNNER_H_
#define PSFORMER_LAUNCHER_JOB_RUNNER_H_

#include <functional>
#include <string>

#include "common/config_loader.h"

namespace psformer {

struct JobOptions {
  JobConfig config;        // resolved and validated
  std::string run_dir;     // created if missing
  bool resume = false;     // continue from the last complete checkpoint
  std::string executable;  // the psformer binary the role processes run (normally this one)
  // The job's CURVE keys (EncodeCurveKeys of common/transport/curve_keys.h), made by the runner
  // when cluster.authenticate is on; each role gets its share in its environment. Empty = none.
  std::string curve_keys;
  // What the run directory's owner does just before the job first writes the directory, once
  // every check that could refuse the job has passed (train --overwrite: clear the earlier run).
  // Under mpirun only rank 0 has one; every rank waits for it before it writes. Null: nothing.
  std::function<Status()> before_first_write;
  // What the run directory's owner undoes when the job fails (train: the lock of a directory the
  // job never wrote, a --resume's config). Under mpirun rank 0 runs it and every rank waits for
  // it before MPI_Finalize: once one rank exits non-zero, mpirun kills those still finalizing.
  std::function<void()> on_failure;
};

// Both return the process exit status (0 when training finished) after printing why not.
int RunSingleNode(const JobOptions& options);
int RunClusterRank(const JobOptions& options);

// The default run directory: runs/<config name>-<YYYYmmdd-HHMMSS>, always inside runs/: the name
// keeps its first 64 letters, digits and ".+_-", anything else (a '/', a space) becomes '_', and
// an empty one is "run" ("../../x" gives runs/.._.._x-TIME).
std::string DefaultRunDir(const JobConfig& config);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_JOB_RUNNER_H_
