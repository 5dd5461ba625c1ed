#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/format_bytes.h"

namespace psformer {
namespace {

class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

 private:
  int fd_;
};

// Reads into bytes[done, bytes.size()) until that is full or the file ends; the count read, or
// -1 with errno set.
ssize_t ReadInto(int fd, std::string* bytes, size_t done) {
  size_t at = done;
  while (at < bytes->size()) {
    const ssize_t n = ::read(fd, bytes->data() + at, bytes->size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    at += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(at - done);
}

}  // namespace

StatusOr<std::string> ReadFileBytes(const std::string& path, const std::string& what, size_t max_bytes,
                                    std::string_view magic) {
  const std::string named = what + " " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound("cannot open " + named + ": " + std::strerror(errno));
  Descriptor file(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::IoError("cannot read " + named + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument("cannot read " + named + ": it is a directory, not a file");
  const bool regular = S_ISREG(st.st_mode);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (regular && size > max_bytes) {
    return Status::InvalidArgument(named + " is " + FormatBytes(size) + ", more than a " + what + " can be (" +
                                   FormatBytes(max_bytes) + "): is it the right file?");
  }
  const size_t limit = regular ? max_bytes : std::min(max_bytes, kMaxStreamBytes);

  std::string bytes(magic.size(), '\0');
  ssize_t n = ReadInto(fd, &bytes, 0);
  if (n < 0) return Status::IoError("cannot read " + named + ": " + std::strerror(errno));
  if (static_cast<size_t>(n) < magic.size() || bytes != magic) {
    bytes.resize(static_cast<size_t>(n));
    return bytes;  // the caller says what the file is instead
  }
  // A regular file: its size, and one byte more to see its end (it may grow while it is read).
  // A stream: 64 KiB, doubled as it fills.
  size_t done = bytes.size();
  size_t want = regular ? std::max<uint64_t>(size, done) + 1 : done + (size_t{64} << 10);
  while (true) {
    want = std::min(want, limit == SIZE_MAX ? limit : limit + 1);
    bytes.resize(want);
    n = ReadInto(fd, &bytes, done);
    if (n < 0) return Status::IoError("cannot read " + named + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
    if (done > limit) {
      return Status::InvalidArgument(named + " gave more than " + FormatBytes(limit) +
                                     (regular ? " (it grew while it was read)"
                                              : " without ending: it is not a regular file (a device, or a pipe "
                                                "that does not end?)"));
    }
    if (done < want) break;  // the end of the file
    want = done + std::max<size_t>(done, size_t{64} << 10);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace psformer
