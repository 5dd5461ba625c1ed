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

// With overlap (cluster.overlap) the passes over payloads (copies, checksums, seals, a server's
// sums and Adam) run while the other processes of the host do theirs: a worker's client copies
// and checks while every server of the host sums and updates. A process whose pools each took every core would
// leave them fighting over the cores (on a 16-core GPU host with a worker and two servers, each
// piece's pass took twice as long: bench/RESULTS.md, "Where the GPU step's time goes"). So the
// supervisor gives each role process on its host an equal share (HostShareThreads) and the role
// sets it here (from its --threads) before making its pools. Without overlap a server updates
// while the workers wait (there, every core: 122.7 ms a step with the share against 112.6 alone),
// and each process keeps the defaults below.
//
// The cores of this machine over the role processes a supervisor runs on it, at least 1.
int HostShareThreads(int processes_on_host);
// This process's threads for passes over payloads: what SetPayloadThreads set (> 0), else
// cluster.threads_per_process when set, else WorkerThreads (client side) or ServerThreads.
void SetPayloadThreads(int threads);
int ClientPayloadThreads(const proto::JobConfig& config);
int ServerPayloadThreads(const proto::JobConfig& config);

}  // namespace psformer

#endif  // PSFORMER_COMMON_ROLE_THREADS_H_
