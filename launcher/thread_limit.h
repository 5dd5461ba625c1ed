// Thread counts a user gives (translate --threads, cluster.threads_per_process), checked against
// the cores this process may run on. A few threads a core can help (waits, hyper-threads); tens of
// thousands only exhaust the machine's threads and memory for every process on it: `translate
// --threads 100000` once made the servers of every other job on the machine abort.
#ifndef PSFORMER_LAUNCHER_THREAD_LIMIT_H_
#define PSFORMER_LAUNCHER_THREAD_LIMIT_H_

#include <string>

#include "common/status.h"

namespace psformer {

// Threads a core that a user may ask for.
inline constexpr int kThreadsPerCoreLimit = 4;

// The cores this process may run on (its CPU affinity, as taskset and cpusets set it); at least 1.
int UsableCores();

// Ok when `threads` is at most kThreadsPerCoreLimit x `cores` (0, "every core", always is);
// else InvalidArgument naming `what` (an option or config field), the count, the cores and the
// largest count accepted.
Status CheckThreadCount(const std::string& what, int threads, int cores = UsableCores());

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_THREAD_LIMIT_H_
