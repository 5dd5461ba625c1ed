#include "common/role_threads.h"

#include <algorithm>
#include <atomic>
#include <thread>

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

int HostShareThreads(int processes_on_host) { return std::max(1, Cores() / std::max(1, processes_on_host)); }

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
