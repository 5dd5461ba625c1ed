// A run directory belongs to one live job. The job's supervisor (the `psformer train` process,
// or rank 0 under mpirun) holds an exclusive flock(2) on RUN_DIR/.lock from before it checks or
// clears the directory until it exits; a second `train`, `--resume` or `--overwrite` on the same
// directory fails to take it and is refused before it writes anything, naming the holder.
//
// What is guaranteed where:
//   - One host, any local file system: always. The kernel drops the lock when the holder's last
//     descriptor closes, so a job killed with -9 (or a dead machine's reboot) leaves no stale lock.
//   - A shared file system seen by several hosts (the ranks of a cluster): only where flock is
//     coordinated by the file server. Linux NFS clients emulate flock with whole-file byte-range
//     locks, which NFSv4 (and NFSv3 with lockd) servers coordinate across clients; mounts with
//     `nolock` or `local_lock=flock|all`, Lustre without `-o flock`, and some FUSE file systems
//     keep the lock on one host only, so two hosts may then both take it. A file system that
//     refuses locks altogether (ENOLCK, ENOSYS, EOPNOTSUPP) gets a warning and no lock.
//
// .lock holds one line naming the holder ("pid 123 on host node0 since 2026-11-25T10:40:00Z")
// while the lock is held and is empty once it is released in order; the file itself stays.
#ifndef PSFORMER_LAUNCHER_RUN_LOCK_H_
#define PSFORMER_LAUNCHER_RUN_LOCK_H_

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"

namespace psformer {

class RunLock {
 public:
  // Takes the lock of `dir`, creating `dir` (and .lock) when missing, and writes the holder
  // line. When a live job holds it, waits at most `wait` for that job to end (saying so once on
  // stderr), then fails with Unavailable naming the holder, without changing a file. A file
  // system without locks gives a lock that holds nothing (held() false) and a warning on stderr.
  static StatusOr<std::unique_ptr<RunLock>> Acquire(const std::string& dir,
                                                    std::chrono::seconds wait = std::chrono::seconds(0));

  // Releases in order: empties the holder line, then unlocks.
  ~RunLock();

  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // For a job refused after Acquire: puts the directory back as it was before (removes .lock and
  // `dir` when Acquire created them, else restores .lock's earlier bytes), then unlocks.
  void Abandon();

  // False when the file system took no lock (see above).
  bool held() const { return fd_ >= 0; }

  // Who holds the lock of `dir` now ("pid P on host H since T", or a note that a starting job
  // has not named itself yet); "" when nobody does. Reads only (--dry-run asks this), but holds a
  // shared lock for the moment it asks: a job starting in that very moment is refused as if
  // another job held the directory, which a second try settles.
  static std::string Holder(const std::string& dir);

  // The path of the lock file: RUN_DIR/.lock.
  static std::string PathIn(const std::string& dir);

 private:
  // One try, without waiting; Unavailable when a live job holds the lock.
  static StatusOr<std::unique_ptr<RunLock>> TryAcquire(const std::string& dir, bool created_dir);

  RunLock(std::string dir, int fd, bool created_dir, bool created_file, std::string earlier)
      : dir_(std::move(dir)),
        fd_(fd),
        created_dir_(created_dir),
        created_file_(created_file),
        earlier_(std::move(earlier)) {}

  std::string dir_;
  int fd_ = -1;                // open on .lock, flock'ed; -1 when no lock could be taken
  bool created_dir_ = false;   // Acquire made `dir_`
  bool created_file_ = false;  // Acquire made .lock
  std::string earlier_;        // .lock's bytes before Acquire wrote the holder line
};

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_RUN_LOCK_H_
