#include "launcher/thread_limit.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace psformer {

int UsableCores() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 0) return CPU_COUNT(&cpus);
  return std::max(1u, std::thread::hardware_concurrency());
}

Status CheckThreadCount(const std::string& what, int threads, int cores) {
  const int64_t limit = static_cast<int64_t>(kThreadsPerCoreLimit) * std::max(cores, 1);
  if (threads <= limit) return Status::Ok();
  return Status::InvalidArgument(what + " " + std::to_string(threads) + " is far more threads than the " +
                                 std::to_string(cores) + " core(s) this machine gives psformer: at most " +
                                 std::to_string(limit) + " (" + std::to_string(kThreadsPerCoreLimit) +
                                 " a core) are accepted; 0 uses every core");
}

}  // namespace psformer
