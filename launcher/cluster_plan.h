// Which role each process of a job plays, and where (docs/architecture.md).
//
// Given the job's server and worker counts and the host of every slot (an MPI rank, or a
// process of single-node mode), servers are spread across hosts round-robin and every other
// slot is a worker; a worker's GPU is its position among the workers of its host (local rank).
// The plan is a pure function of its inputs, so every rank computes the same one.
#ifndef PSFORMER_LAUNCHER_CLUSTER_PLAN_H_
#define PSFORMER_LAUNCHER_CLUSTER_PLAN_H_

#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

struct RoleSlot {
  // kAggregator: a host group's summing point (cluster.host_groups), placed beside its workers.
  enum class Kind { kServer, kWorker, kAggregator };
  Kind kind = Kind::kWorker;
  int index = 0;  // server index, worker index or host group.
  int slot = 0;   // MPI rank (or process number in single-node mode).
  std::string host;
  int local_gpu = -1;  // workers on a GPU backend: the device ordinal on their host.
  std::string name() const {
    const char* prefix = kind == Kind::kServer ? "pserver-" : kind == Kind::kWorker ? "worker-" : "aggregator-";
    return prefix + std::to_string(index);
  }
};

struct ClusterPlanOptions {
  int servers = 1;
  int workers = 1;
  bool gpu_workers = false;  // assign local GPUs to workers
  // GPUs visible on each host (by host name); a host absent here has none. Only read when
  // gpu_workers is set.
  std::vector<std::pair<std::string, int>> gpus_per_host;
};

class ClusterPlan {
 public:
  // `hosts[i]` is the host of slot i. Fails, saying why, when the slot count does not match
  // servers + workers or a host has more GPU workers than GPUs.
  static StatusOr<ClusterPlan> Make(const ClusterPlanOptions& options, const std::vector<std::string>& hosts);
  // Whether `ranks` processes suit cluster.servers and cluster.workers (0: every rank that is not
  // a server), saying what to start where not: Make's first check, which --dry-run makes too.
  static Status CheckRanks(int ranks, int servers, int workers);
  // The decision alone: CheckRanks's, and `psformer launch`'s before it starts mpirun.
  static bool RanksFit(int ranks, int servers, int workers) {
    return workers == 0 ? ranks > servers : ranks == servers + workers;
  }

  const std::vector<RoleSlot>& slots() const { return slots_; }
  const RoleSlot& slot(int i) const { return slots_[i]; }
  // The slot of server `index` / worker `index`.
  const RoleSlot& server(int index) const { return slots_[server_slots_[index]]; }
  const RoleSlot& worker(int index) const { return slots_[worker_slots_[index]]; }
  int servers() const { return static_cast<int>(server_slots_.size()); }
  int workers() const { return static_cast<int>(worker_slots_.size()); }
  int hosts() const { return host_count_; }

 private:
  std::vector<RoleSlot> slots_;
  std::vector<int> server_slots_;
  std::vector<int> worker_slots_;
  int host_count_ = 0;
};

// Whether workers run on GPUs, from cluster.backend and the GPUs each host reports (host name,
// CUDA device count): CUDA needs a GPU on every host; AUTO means GPUs when every host has one and
// CPU when none has. Fails, naming the host, for CUDA on a host without a GPU and for AUTO on a
// mix of hosts with and without GPUs (workers of one BSP job should not differ by an order of
// magnitude in speed; the user chooses with cluster.backend). CPU and EMULATED workers use no GPU.
StatusOr<bool> ChooseGpuWorkers(proto::ClusterConfig::Backend backend,
                                const std::vector<std::pair<std::string, int>>& gpus_per_host);

// The hosts of every rank and the GPUs each host has, from every rank's report "HOST GPUS".
void ReadHostReports(const std::vector<std::string>& reports, std::vector<std::string>* hosts,
                     std::vector<std::pair<std::string, int>>* gpus_per_host);

// Host summing's groups, written into `config`: cluster.host_groups as given (fails, naming the
// worker and hosts, unless each group's workers share a host and the groups add up to the
// plan's workers), or one group per host, from the plan, when none are given (fails when a
// host's ranks are not consecutive). Fewer than two groups: the flat path (no groups).
Status ResolveHostGroups(const ClusterPlan& plan, proto::JobConfig* config);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_CLUSTER_PLAN_H_
