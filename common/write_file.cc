#include "common/write_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/interrupt_cleanup.h"
#include "common/process_exists.h"
#include "common/run_directory_identity.h"

namespace psformer {
namespace {

Status Failed(const std::string& what, const std::string& path, int error) {
  return Status::IoError("cannot " + what + " " + path + ": " + std::strerror(error));
}

// Writes all of `bytes` to `fd`; 0 or the errno of the write that failed.
int WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;  // a write that moves nothing would loop forever
    done += static_cast<size_t>(n);
  }
  return 0;
}

// A device or a pipe: written where it is; nothing to rename, nothing to sync.
Status WriteInPlace(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Failed("open", path, errno);
  const int error = WriteAll(fd, bytes);
  if (error != 0) {
    ::close(fd);
    return Failed("write", path, error);
  }
  if (::close(fd) != 0) return Failed("write", path, errno);
  return Status::Ok();
}

// Syncs the directory holding `path`, so that the rename survives a crash. EINVAL: a file
// system that cannot sync directories; the rename is then as durable as that file system makes it.
Status SyncDirectoryOf(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  const std::string dir = parent.empty() ? std::string(".") : parent;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Failed("open the directory", dir, errno);
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  if (synced != 0 && synced != EINVAL) return Failed("sync the directory", dir, synced);
  return Status::Ok();
}

Status ReplaceRegularFile(const std::string& path, const std::string& bytes) {
  // Unique per process: several processes may write the same file (every rank writes the
  // resolved config.pbtxt); each rename is atomic and the contents are the same.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Failed("create", tmp, errno);
  RegisterTemporary(tmp);
  int error = WriteAll(fd, bytes);
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  const Status written = error != 0 ? Failed("write", path, error) : CommitTemporary(tmp, [&] {
    return std::rename(tmp.c_str(), path.c_str()) == 0 ? Status::Ok() : Failed("write", path, errno);
  });
  if (!written.ok()) {
    RemoveTemporary(tmp);
    return written;
  }
  return SyncDirectoryOf(path);
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  struct stat link;
  if (::lstat(path.c_str(), &link) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      // Said of the directory, not of the temporary file the write would have made in it.
      std::error_code ec;
      const std::filesystem::path parent = std::filesystem::absolute(path, ec).parent_path();
      if (!std::filesystem::is_directory(parent, ec)) {
        return Status::IoError("cannot write " + path + ": " +
                               (std::filesystem::exists(parent, ec)
                                    ? parent.string() + " is a file, not a directory"
                                    : "its directory " + parent.string() + " does not exist"));
      }
    }
    if (error != ENOENT) return Failed("write", path, error);
    return ReplaceRegularFile(path, bytes);
  }
  std::string target = path;
  struct stat st = link;
  if (S_ISLNK(link.st_mode)) {
    if (::stat(path.c_str(), &st) != 0) return Failed("write", path + " (a symbolic link)", errno);
    char resolved[PATH_MAX];
    // A pipe behind /dev/stdout has no path; it is written in place through the link.
    if (S_ISREG(st.st_mode)) {
      if (::realpath(path.c_str(), resolved) == nullptr) return Failed("resolve", path, errno);
      target = resolved;
    }
  }
  if (S_ISREG(st.st_mode)) return ReplaceRegularFile(target, bytes);
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return WriteInPlace(path, bytes);
  const char* kind = S_ISDIR(st.st_mode) ? "a directory" : S_ISBLK(st.st_mode) ? "a block device" : "a socket";
  return Status::InvalidArgument("cannot write " + path + ": it is " + kind +
                                 "; psformer writes results to regular files, character devices or pipes only");
}

void RemoveDeadWritersTemporaryFiles(const std::string& path) {
  std::error_code ec;
  // The same directory as the write's, physically: through a link, its target's.
  const std::filesystem::path target = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec || !target.has_filename()) return;
  const std::string prefix = target.filename().string() + ".tmp.";
  const std::filesystem::path parent = target.parent_path();
  for (std::filesystem::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = entry.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid() || ProcessExists(pid)) continue;
    std::error_code ignored;
    if (it->is_regular_file(ignored) && !it->is_symlink(ignored)) std::filesystem::remove(it->path(), ignored);
  }
}

Status CheckReplaceable(const std::string& option, const std::string& path, std::string_view magic,
                        const std::string& kind) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return Status::Ok();
  std::ifstream in(path, std::ios::binary);
  std::string head(magic.size(), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (in.gcount() == static_cast<std::streamsize>(head.size()) && head == magic) return Status::Ok();
  return Status::InvalidArgument(option + " " + path + " exists and is not a " + kind +
                                 "; it replaces only an earlier " + kind + ": remove it or name another file");
}

Status MakeDirectories(const std::string& dir, const std::string& what) {
  const std::string failed = "cannot create " + (what.empty() ? std::string() : what + " ") + dir + ": ";
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::absolute(dir, ec).lexically_normal();
  for (std::filesystem::path up = target; !up.empty(); up = up.parent_path()) {
    if (std::filesystem::exists(up, ec)) {
      if (!std::filesystem::is_directory(up, ec)) {
        return Status::IoError(failed + (up == target ? dir : up.string()) + " is a file, not a directory");
      }
      break;
    }
    if (up == up.root_path()) break;
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(failed + ec.message());
  return Status::Ok();
}

Status MakeDirectoriesInRun(const std::string& run_dir, const std::string& dir) {
  PSF_RETURN_IF_ERROR(CheckRunDirectoryUnchanged(run_dir));
  std::error_code ec;
  if (!std::filesystem::is_directory(run_dir, ec)) {
    return Status::IoError("cannot create " + dir + ": the run directory " + run_dir +
                           " no longer exists (it was removed or renamed while the job ran)");
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace psformer
