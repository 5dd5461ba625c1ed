#include "pserver/server/consistency_policy.h"

#include <algorithm>

#include "pserver/server/async_policy.h"
#include "common/host_groups.h"
#include "pserver/server/bsp_policy.h"

namespace psformer {

int64_t ShardProgress::SlowestWorkerStep() const { return *std::min_element(worker_steps.begin(), worker_steps.end()); }

std::unique_ptr<ConsistencyPolicy> MakeConsistencyPolicy(const proto::JobConfig& config, ShardRange range, int threads,
                                                         const std::vector<uint64_t>& piece_starts,
                                                         const std::vector<uint8_t>& split_pieces) {
  const proto::ClusterConfig& cluster = config.cluster();
  const HostGroups groups = HostGroups::Of(config);
  switch (cluster.consistency()) {
    case proto::ClusterConfig::BSP:
      // With host summing a piece's shares are the groups' sums, added in group order.
      return std::make_unique<BspPolicy>(groups.summing() ? groups.count() : cluster.workers(), range, piece_starts,
                                         split_pieces);
    case proto::ClusterConfig::SSP:
      return std::make_unique<SspPolicy>(range, cluster.staleness(), threads);
    default:
      return std::make_unique<AsyncPolicy>(range, threads);
  }
}

}  // namespace psformer
