#include "common/checkpoint/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/binary_codec.h"
#include "common/read_file.h"

namespace psformer {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'F', 'S', 'H', 'A', 'R', 'D'};
constexpr uint32_t kVersion = 1;

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// A sink that writes to `fd` (named `path` in errors), all of it or a failure.
BinarySink FileSink(int fd, const std::string& path) {
  return [fd, path](const void* data, size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::IoError(Errno("cannot write", path));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  };
}

Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Status::IoError(Errno("cannot open directory", dir));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IoError(Errno("cannot fsync directory", dir));
  return Status::Ok();
}

// Writes through `fill` (given the temporary file's sink) into a temporary file, then fsync,
// rename, directory fsync.
template <typename Fill>
Status AtomicWrite(const std::string& path, Fill fill) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(Errno("cannot create", tmp));
  Status s = fill(FileSink(fd, tmp));
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

}  // namespace

Status WriteShardFile(const std::string& path, const ShardCheckpointView& s) {
  const size_t n = s.end - s.begin;
  return AtomicWrite(path, [&](const BinarySink& sink) -> Status {
    BinaryWriter w(sink, std::string_view(kMagic, sizeof(kMagic)), kVersion);
    w.Put(static_cast<uint32_t>(s.shard));
    w.Put(static_cast<uint32_t>(s.shards));
    w.Put(s.step);
    w.Put(s.updates);
    w.Put(s.begin);
    w.Put(s.end);
    w.Put(static_cast<uint32_t>(s.worker_steps.size()));
    w.PutArray(s.worker_steps.data(), s.worker_steps.size());
    w.PutArray(s.params, n);
    if (s.midway) s.midway();
    w.PutArray(s.m, n);
    w.PutArray(s.v, n);
    return w.Finish();
  });
}

Status WriteCheckpointFileAtomically(const std::string& path, const std::string& bytes) {
  return AtomicWrite(path, [&](const BinarySink& sink) { return sink(bytes.data(), bytes.size()); });
}

StatusOr<std::string> ReadCheckpointFile(const std::string& path) {
  return ReadFileBytes(path, "checkpoint file", kAnyFileSize);
}

StatusOr<ShardCheckpoint> ReadShardFile(const std::string& path) {
  PSF_ASSIGN_OR_RETURN(std::string bytes, ReadCheckpointFile(path));
  auto corrupt = [&](const std::string& why) { return Status::Corruption("shard file " + path + ": " + why); };
  if (bytes.size() < sizeof(kMagic) + 4 + 4) return corrupt("truncated (" + std::to_string(bytes.size()) + " bytes)");
  BinaryReader r(bytes);
  if (!r.ChecksumMatches()) return corrupt("checksum mismatch (truncated or altered)");
  uint32_t version = 0, shard = 0, shards = 0, workers = 0;
  ShardCheckpoint c;
  if (!r.HasMagic(std::string_view(kMagic, sizeof(kMagic)))) return corrupt("not a shard file (bad magic)");
  if (!r.Get(&version) || version != kVersion) return corrupt("unsupported version " + std::to_string(version));
  if (!r.Get(&shard) || !r.Get(&shards) || !r.Get(&c.step) || !r.Get(&c.updates) || !r.Get(&c.begin) ||
      !r.Get(&c.end) || !r.Get(&workers)) {
    return corrupt("truncated header");
  }
  c.shard = static_cast<int32_t>(shard);
  c.shards = static_cast<int32_t>(shards);
  const uint64_t n = c.end >= c.begin ? c.end - c.begin : 0;
  const uint64_t need = r.position() + workers * 8ull + 3 * n * 4ull + 4;
  if (c.end < c.begin || need != bytes.size()) return corrupt("size does not match its header");
  c.worker_steps.resize(workers);
  c.params.resize(n);
  c.m.resize(n);
  c.v.resize(n);
  r.GetArray(c.worker_steps.data(), workers);
  r.GetArray(c.params.data(), n);
  r.GetArray(c.m.data(), n);
  r.GetArray(c.v.data(), n);
  return c;
}

}  // namespace psformer
