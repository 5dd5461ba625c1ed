// How many CPU threads a role process gives its own work: a worker's CPU compute and a server's
// update passes, and both sides' copies and checksums of payloads in shared memory.
#ifndef PSFORMER_COMMON_ROLE_THREADS_H_
#define PSFORMER_COMMON_ROLE_THREADS_H_

#include "common/proto/config.pb.h"

namespace psformer {

// cluster.threads_per_process when set; else the cores shared among the job's workers.
int WorkerThreads(const proto::JobConfig& config);
// cluster.threads_per_process when set; else every core (a server works while workers wait on it).
int ServerThreads(const proto::JobConfig& config);

}  // namespace psformer

#endif  // PSFORMER_COMMON_ROLE_THREADS_H_
