// Whether a process of this PID namespace runs: kill(pid, 0) succeeds, or fails for another
// reason than ESRCH (EPERM: another user's process runs under that pid).
#ifndef PSFORMER_COMMON_PROCESS_EXISTS_H_
#define PSFORMER_COMMON_PROCESS_EXISTS_H_

#include <signal.h>
#include <sys/types.h>

#include <cerrno>

namespace psformer {

inline bool ProcessExists(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

}  // namespace psformer

#endif  // PSFORMER_COMMON_PROCESS_EXISTS_H_
