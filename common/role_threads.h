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
// and checks while every server of the host sums and updates. Processes whose pools each took
// every core left them fighting over the cores: on a 16-core H100 host with a worker and two
// servers each piece's pass took about twice as long as with 4 threads a process (bench/RESULTS.md,
// "On an H100: the real step, and where its time goes"). So the supervisor gives each role process
// of its host a share by the passes it makes (HostShareThreads, PayloadWeight), and the role sets
// it here (from its --threads) before making its pools. Without overlap a server updates while
// the workers wait, and each process keeps the defaults above (with the share there: 122.7 ms a
// step against 112.6-118.7 without).
//
// A role process's share of this machine's cores, at least 1: `weight` over the weights of every
// role process a supervisor runs on it (PayloadWeight). HostShareThreads(1, n): an equal share.
int HostShareThreads(int weight, int total_weight);
// How much passing over payloads a role does a step, relative to a worker's (its push and its
// pull, 1): a server checks and sums the pushes of every pusher for its shard (the job's
// workers, or its host groups' aggregators when summing on hosts), pushers / servers of them
// (at least 1); an aggregator sums its group's workers. A guess from the passes each makes, not
// a measurement; only the 1-worker, 2-server weights (1 each) were measured on a GPU host.
int PayloadWeight(const proto::JobConfig& config, bool server, bool aggregator, int aggregator_group);
// This process's threads for passes over payloads: what SetPayloadThreads set (> 0), else
// cluster.threads_per_process when set, else WorkerThreads (client side) or ServerThreads.
void SetPayloadThreads(int threads);
int ClientPayloadThreads(const proto::JobConfig& config);
int ServerPayloadThreads(const proto::JobConfig& config);

}  // namespace psformer

#endif  // PSFORMER_COMMON_ROLE_THREADS_H_
