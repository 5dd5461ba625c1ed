// ShmJanitor: removes a job's shared-memory segments (common/transport/shm_segment.h) when its
// supervisor is killed outright (`kill -9` of the supervisor, of its process group), which
// removes them itself only when it lives to the end. Its role processes die with it
// (PR_SET_PDEATHSIG), each leaving its segments, tens to hundreds of MB of RAM in /dev/shm;
// only the next `train` on the host swept them up before.
//
// Start() forks a small process in a session of its own (out of reach of the terminal's and the
// job's process-group signals) that holds the read end of a pipe. The supervisor writes the pid
// of each role process it starts into it (Watch). When the pipe ends without a word from the
// supervisor (it died, however), the janitor waits for those roles to be gone (at most 10 s),
// unlinks the job's segments that they made, and exits. A supervisor that ends normally says so
// (Done, or the destructor) after removing the segments itself, and the janitor exits at once.
// It runs no code but system calls after fork, so it is safe to start from a threaded process.
#ifndef PSFORMER_LAUNCHER_SHM_JANITOR_H_
#define PSFORMER_LAUNCHER_SHM_JANITOR_H_

#include <sys/types.h>

#include <cstdint>

namespace psformer {

class ShmJanitor {
 public:
  // Starts the janitor of `job_id`'s segments; one that cannot start (fork refused) logs a
  // warning and leaves the sweep to the next job on the host, as before.
  explicit ShmJanitor(uint64_t job_id);
  ~ShmJanitor() { Done(); }
  ShmJanitor(const ShmJanitor&) = delete;
  ShmJanitor& operator=(const ShmJanitor&) = delete;

  // A role process this supervisor started, whose segments the janitor removes if need be.
  void Watch(pid_t role);
  // The supervisor has removed the job's segments itself: the janitor exits without a sweep.
  void Done();

 private:
  int fd_ = -1;     // the write end of the janitor's pipe
  pid_t pid_ = -1;  // the janitor
};

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_SHM_JANITOR_H_
