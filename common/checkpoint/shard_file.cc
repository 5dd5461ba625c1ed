#include "common/checkpoint/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/crc32c.h"

namespace psformer {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'F', 'S', 'H', 'A', 'R', 'D'};
constexpr uint32_t kVersion = 1;

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Appends to an open file while keeping a running CRC-32C of everything written.
class CheckedWriter {
 public:
  CheckedWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status Write(const void* data, size_t n) {
    crc_ = Crc32c(crc_, data, n);
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::IoError(Errno("cannot write", path_));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  template <typename T>
  Status Put(T value) {
    return Write(&value, sizeof(value));
  }
  uint32_t crc() const { return crc_; }

 private:
  int fd_;
  std::string path_;
  uint32_t crc_ = 0;
};

Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Status::IoError(Errno("cannot open directory", dir));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IoError(Errno("cannot fsync directory", dir));
  return Status::Ok();
}

// Writes through `fill` into a temporary file, then fsync, rename, directory fsync.
template <typename Fill>
Status AtomicWrite(const std::string& path, Fill fill) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(Errno("cannot create", tmp));
  CheckedWriter writer(fd, tmp);
  Status s = fill(writer);
  if (s.ok() && ::fsync(fd) != 0) s = Status::IoError(Errno("cannot fsync", tmp));
  if (::close(fd) != 0 && s.ok()) s = Status::IoError(Errno("cannot close", tmp));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Status::IoError(Errno("cannot rename to", path));
  if (!s.ok()) {
    ::unlink(tmp.c_str());  // a full disk must not leave half a file behind.
    return s;
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return FsyncDirectory(dir.empty() ? "." : dir);
}

// Reads fixed-size fields from a byte string, refusing to run past its end.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  bool Get(void* out, size_t n) {
    if (n > bytes_.size() - at_) return false;
    std::memcpy(out, bytes_.data() + at_, n);
    at_ += n;
    return true;
  }
  template <typename T>
  bool Get(T* out) {
    return Get(out, sizeof(T));
  }
  size_t at() const { return at_; }

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

}  // namespace

Status WriteShardFile(const std::string& path, const ShardCheckpointView& s) {
  const size_t n = s.end - s.begin;
  return AtomicWrite(path, [&](CheckedWriter& w) -> Status {
    PSF_RETURN_IF_ERROR(w.Write(kMagic, sizeof(kMagic)));
    PSF_RETURN_IF_ERROR(w.Put(kVersion));
    PSF_RETURN_IF_ERROR(w.Put(static_cast<uint32_t>(s.shard)));
    PSF_RETURN_IF_ERROR(w.Put(static_cast<uint32_t>(s.shards)));
    PSF_RETURN_IF_ERROR(w.Put(s.step));
    PSF_RETURN_IF_ERROR(w.Put(s.updates));
    PSF_RETURN_IF_ERROR(w.Put(s.begin));
    PSF_RETURN_IF_ERROR(w.Put(s.end));
    PSF_RETURN_IF_ERROR(w.Put(static_cast<uint32_t>(s.worker_steps.size())));
    PSF_RETURN_IF_ERROR(w.Write(s.worker_steps.data(), s.worker_steps.size() * sizeof(int64_t)));
    PSF_RETURN_IF_ERROR(w.Write(s.params, n * sizeof(float)));
    if (s.midway) s.midway();
    PSF_RETURN_IF_ERROR(w.Write(s.m, n * sizeof(float)));
    PSF_RETURN_IF_ERROR(w.Write(s.v, n * sizeof(float)));
    const uint32_t crc = w.crc();
    return w.Put(crc);
  });
}

Status WriteCheckpointFileAtomically(const std::string& path, const std::string& bytes) {
  return AtomicWrite(path, [&](CheckedWriter& w) { return w.Write(bytes.data(), bytes.size()); });
}

StatusOr<std::string> ReadCheckpointFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path);
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return Status::IoError("cannot read " + path);
  return out.str();
}

StatusOr<ShardCheckpoint> ReadShardFile(const std::string& path) {
  PSF_ASSIGN_OR_RETURN(std::string bytes, ReadCheckpointFile(path));
  auto corrupt = [&](const std::string& why) { return Status::Corruption("shard file " + path + ": " + why); };
  if (bytes.size() < sizeof(kMagic) + 4 + 4) return corrupt("truncated (" + std::to_string(bytes.size()) + " bytes)");
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const uint32_t crc = Crc32c(0, bytes.data(), bytes.size() - 4);
  if (crc != stored_crc) return corrupt("checksum mismatch (truncated or altered)");
  Reader r(bytes);
  char magic[8];
  uint32_t version = 0, shard = 0, shards = 0, workers = 0;
  ShardCheckpoint c;
  if (!r.Get(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return corrupt("not a shard file (bad magic)");
  if (!r.Get(&version) || version != kVersion) return corrupt("unsupported version " + std::to_string(version));
  if (!r.Get(&shard) || !r.Get(&shards) || !r.Get(&c.step) || !r.Get(&c.updates) || !r.Get(&c.begin) ||
      !r.Get(&c.end) || !r.Get(&workers)) {
    return corrupt("truncated header");
  }
  c.shard = static_cast<int32_t>(shard);
  c.shards = static_cast<int32_t>(shards);
  const uint64_t n = c.end >= c.begin ? c.end - c.begin : 0;
  const uint64_t need = r.at() + workers * 8ull + 3 * n * 4ull + 4;
  if (c.end < c.begin || need != bytes.size()) return corrupt("size does not match its header");
  c.worker_steps.resize(workers);
  c.params.resize(n);
  c.m.resize(n);
  c.v.resize(n);
  r.Get(c.worker_steps.data(), workers * 8ull);
  r.Get(c.params.data(), n * 4);
  r.Get(c.m.data(), n * 4);
  r.Get(c.v.data(), n * 4);
  return c;
}

}  // namespace psformer
