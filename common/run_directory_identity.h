// Which directory a run directory's path names: its device and inode. A run directory removed,
// renamed, or removed and made again under the same name (`rm -rf RUN` and another job there)
// while its job still runs is no longer that job's; the supervisor (launcher/role_supervisor.cc)
// ends such a job, and its role processes check before each checkpoint that they would not
// write it into another directory of that name, or make the run directory anew.
#ifndef PSFORMER_COMMON_RUN_DIRECTORY_IDENTITY_H_
#define PSFORMER_COMMON_RUN_DIRECTORY_IDENTITY_H_

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace psformer {

class RunDirectoryIdentity {
 public:
  enum class Change {
    kNone,      // the same directory, or one that could not be looked at, then or now for
                // another reason than its absence (a network file system's hiccup is no loss)
    kRemoved,   // no directory by that name: removed or renamed
    kReplaced,  // another directory by that name: removed and made again
  };

  // The directory `path` names now; one that cannot be looked at has no identity (Look then
  // says kNone).
  explicit RunDirectoryIdentity(std::string path);

  // What became of the directory since.
  Change Look() const;

  // "was removed or renamed" or "was replaced (removed and made again, perhaps by another
  // job)". REQUIRES: change != kNone.
  static std::string Describe(Change change);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool known_ = false;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

// A role process's run directory, noted once when it starts (launcher/role_arguments.cc).
void RememberRunDirectory(const std::string& run_dir);

// Ok unless `run_dir` is the remembered run directory and no longer names the directory it named
// then: IoError saying so. Ok in a process that remembered none (tests, `train --local`).
Status CheckRunDirectoryUnchanged(const std::string& run_dir);

}  // namespace psformer

#endif  // PSFORMER_COMMON_RUN_DIRECTORY_IDENTITY_H_
