#include "launcher/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>

#include "common/clock_text.h"
#include "common/write_file.h"
#include "launcher/port_reservation.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

// Tries a few times only: the lock file can vanish under us only when another job abandons it
// (Abandon unlinks a .lock it made), and that happens once per refused job.
constexpr int kOpenAttempts = 5;

// How often a waiting Acquire asks again.
constexpr std::chrono::milliseconds kWaitPoll{200};

std::string HolderLine() {
  return "pid " + std::to_string(::getpid()) + " on host " + HostName() + " since " +
         ClockText(std::time(nullptr), "%Y-%m-%dT%H:%M:%SZ", TimeZone::kUtc) + "\n";
}

std::string ReadAll(int fd) {
  std::string text;
  char buffer[512];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof(buffer), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;
    text.append(buffer, static_cast<size_t>(n));
    offset += n;
    // A holder line is short; a huge .lock is not ours to read whole.
    if (text.size() > 4096) return text.substr(0, 4096);
  }
}

bool ReplaceContents(int fd, const std::string& text) {
  if (::ftruncate(fd, 0) != 0) return false;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Whether `fd` is still the file at `path`: a .lock unlinked by a job that abandoned it while we
// waited to open it would lock nothing anyone else sees.
bool StillLinked(int fd, const std::string& path) {
  struct stat opened, named;
  if (::fstat(fd, &opened) != 0 || ::stat(path.c_str(), &named) != 0) return false;
  return opened.st_dev == named.st_dev && opened.st_ino == named.st_ino;
}

// File systems that answer flock with these do not lock at all (see run_lock.h).
bool LocksUnsupported(int error) { return error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP; }

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string HolderText(const std::string& holder) {
  return holder.empty() ? "a job that is starting (it has not named itself yet)" : Trimmed(holder);
}

Status InUse(const std::string& dir, const std::string& holder) {
  const std::string who = HolderText(holder);
  return Status::Unavailable("run directory " + dir + " is in use by a live job: " + who +
                             "; a run directory belongs to one live job: wait for it to end or stop it, or choose "
                             "another --run-dir");
}

}  // namespace

std::string RunLock::PathIn(const std::string& dir) { return (fs::path(dir) / ".lock").string(); }

StatusOr<std::unique_ptr<RunLock>> RunLock::Acquire(const std::string& dir, std::chrono::seconds wait) {
  std::error_code ec;
  const bool created_dir = !fs::exists(dir, ec);
  if (created_dir) PSF_RETURN_IF_ERROR(MakeDirectories(dir, "run directory"));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (bool said = false;; said = true) {
    auto lock = TryAcquire(dir, created_dir);
    if (lock.ok() || !lock.status().IsUnavailable() || std::chrono::steady_clock::now() >= deadline) return lock;
    if (!said) {
      std::cerr << "psformer train: " << lock.status().message() << "; waiting up to " << wait.count()
                << " s for it to end\n";
    }
    std::this_thread::sleep_for(kWaitPoll);
  }
}

StatusOr<std::unique_ptr<RunLock>> RunLock::TryAcquire(const std::string& dir, bool created_dir) {
  const std::string path = PathIn(dir);
  for (int attempt = 0; attempt < kOpenAttempts; ++attempt) {
    bool created_file = true;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
      created_file = false;
      fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) return Status::IoError("cannot open the run's lock file " + path + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      if (LocksUnsupported(error)) {
        std::cerr << "psformer train: warning: the file system of " << dir << " takes no locks ("
                  << std::strerror(error) << "): nothing stops a second job from using this run directory\n";
        ::close(fd);
        return std::unique_ptr<RunLock>(new RunLock(dir, -1, created_dir, created_file, ""));
      }
      const std::string holder = ReadAll(fd);
      ::close(fd);
      if (error == EWOULDBLOCK) return InUse(dir, holder);
      return Status::IoError("cannot lock " + path + ": " + std::strerror(error));
    }
    if (!StillLinked(fd, path)) {
      ::close(fd);
      continue;
    }
    std::string earlier = ReadAll(fd);
    if (!ReplaceContents(fd, HolderLine())) {
      const std::string why = std::strerror(errno);
      auto lock = std::unique_ptr<RunLock>(new RunLock(dir, fd, created_dir, created_file, std::move(earlier)));
      lock->Abandon();
      return Status::IoError("cannot write the run's lock file " + path + ": " + why);
    }
    return std::unique_ptr<RunLock>(new RunLock(dir, fd, created_dir, created_file, std::move(earlier)));
  }
  return Status::IoError("cannot lock " + path + ": it was replaced " + std::to_string(kOpenAttempts) +
                         " times while being locked");
}

std::string RunLock::Holder(const std::string& dir) {
  const int fd = ::open(PathIn(dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string holder;
  // A shared lock conflicts with the holder's exclusive one only; taken, it is dropped at once.
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) holder = HolderText(ReadAll(fd));
  ::close(fd);
  return holder;
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // Best effort: a holder line left behind names a job that is gone, and the next holder
  // overwrites it; the lock itself goes with the descriptor either way.
  (void)ReplaceContents(fd_, "");
  ::close(fd_);
}

void RunLock::Abandon() {
  // Unlinked or restored while still locked, so no other job reads a half-restored file.
  if (created_file_) {
    ::unlink(PathIn(dir_).c_str());
  } else if (fd_ >= 0) {
    (void)ReplaceContents(fd_, earlier_);
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  if (created_dir_) fs::remove(dir_, ec);  // only when still empty
}

}  // namespace psformer
