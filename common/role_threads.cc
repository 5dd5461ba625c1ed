#include "common/role_threads.h"

#include <algorithm>
#include <thread>

namespace psformer {
namespace {

int Cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

int WorkerThreads(const proto::JobConfig& config) {
  if (config.cluster().threads_per_process() > 0) return config.cluster().threads_per_process();
  return std::max(1, Cores() / std::max(1, config.cluster().workers()));
}

int ServerThreads(const proto::JobConfig& config) {
  if (config.cluster().threads_per_process() > 0) return config.cluster().threads_per_process();
  return Cores();
}

}  // namespace psformer
