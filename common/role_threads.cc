#include "common/role_threads.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/host_groups.h"

namespace psformer {
namespace {

int Cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::atomic<int> payload_threads{0};

}  // namespace

int WorkerThreads(const proto::JobConfig& config) {
  if (config.cluster().threads_per_process() > 0) return config.cluster().threads_per_process();
  return std::max(1, Cores() / std::max(1, config.cluster().workers()));
}

int ServerThreads(const proto::JobConfig& config) {
  if (config.cluster().threads_per_process() > 0) return config.cluster().threads_per_process();
  return Cores();
}

int HostShareThreads(int weight, int total_weight) {
  return std::max(1, Cores() * std::max(1, weight) / std::max(1, total_weight));
}

int PayloadWeight(const proto::JobConfig& config, bool server, bool aggregator, int aggregator_group) {
  const HostGroups groups = HostGroups::Of(config);
  if (aggregator) {
    const bool known = groups.summing() && aggregator_group >= 0 && aggregator_group < groups.count();
    return known ? std::max(1, groups.size(aggregator_group)) : 1;
  }
  if (!server) return 1;
  const int pushers = groups.summing() ? groups.count() : config.cluster().workers();
  return std::max(1, pushers / std::max(1, config.cluster().servers()));
}

void SetPayloadThreads(int threads) { payload_threads.store(threads); }

int ClientPayloadThreads(const proto::JobConfig& config) {
  const int set = payload_threads.load();
  return set > 0 ? set : WorkerThreads(config);
}

int ServerPayloadThreads(const proto::JobConfig& config) {
  const int set = payload_threads.load();
  return set > 0 ? set : ServerThreads(config);
}

}  // namespace psformer
