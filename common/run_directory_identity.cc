#include "common/run_directory_identity.h"

#include <sys/stat.h>

#include <cerrno>
#include <memory>

#include "common/thread_annotations.h"

namespace psformer {

RunDirectoryIdentity::RunDirectoryIdentity(std::string path) : path_(std::move(path)) {
  struct stat st {};
  known_ = stat(path_.c_str(), &st) == 0;
  device_ = st.st_dev;
  inode_ = st.st_ino;
}

RunDirectoryIdentity::Change RunDirectoryIdentity::Look() const {
  if (!known_) return Change::kNone;
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0) return errno == ENOENT || errno == ENOTDIR ? Change::kRemoved : Change::kNone;
  return st.st_dev == device_ && st.st_ino == inode_ ? Change::kNone : Change::kReplaced;
}

std::string RunDirectoryIdentity::Describe(Change change) {
  return change == Change::kRemoved ? "was removed or renamed"
                                    : "was replaced (removed and made again, perhaps by another job)";
}

namespace {

Mutex g_mu;
std::unique_ptr<RunDirectoryIdentity> g_remembered PSF_GUARDED_BY(g_mu);

}  // namespace

void RememberRunDirectory(const std::string& run_dir) {
  MutexLock lock(&g_mu);
  g_remembered = std::make_unique<RunDirectoryIdentity>(run_dir);
}

Status CheckRunDirectoryUnchanged(const std::string& run_dir) {
  MutexLock lock(&g_mu);
  if (g_remembered == nullptr || g_remembered->path() != run_dir) return Status::Ok();
  const RunDirectoryIdentity::Change change = g_remembered->Look();
  if (change == RunDirectoryIdentity::Change::kNone) return Status::Ok();
  return Status::IoError("the run directory " + run_dir + " " + RunDirectoryIdentity::Describe(change) +
                         " while the job ran; nothing more of this job is written there");
}

}  // namespace psformer
