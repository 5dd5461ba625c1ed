// One server's shard checkpoint file: parameters, Adam moments and the counters needed to carry
// on exactly where the shard stopped. Binary, little-endian (the hosts we run on):
//   magic "PSFSHARD" (8 bytes), version u32 (= 1),
//   shard u32, shards u32, step i64, updates u64, begin u64, end u64,
//   workers u32, worker_steps i64[workers],
//   params f32[end-begin], m f32[end-begin], v f32[end-begin],
//   crc32c u32 over every byte before it.
// Written atomically: a temporary file beside the target, fsync, rename, fsync of the directory,
// so a crash leaves either the old file or the new one, never a torn one.
#ifndef PSFORMER_COMMON_CHECKPOINT_SHARD_FILE_H_
#define PSFORMER_COMMON_CHECKPOINT_SHARD_FILE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace psformer {

// What a server saves; the arrays are borrowed for the duration of the write.
struct ShardCheckpointView {
  int32_t shard = 0;
  int32_t shards = 1;
  int64_t step = 0;      // the last step whose update is in params.
  uint64_t updates = 0;  // Adam updates applied (the bias-correction counter).
  uint64_t begin = 0;    // element range of the flat vector.
  uint64_t end = 0;
  std::vector<int64_t> worker_steps;  // last step pushed by each worker.
  const float* params = nullptr;      // (end - begin)
  const float* m = nullptr;           // (end - begin)
  const float* v = nullptr;           // (end - begin)
  std::function<void()> midway;       // fault injection: called halfway through writing the file.
};

// What a load returns: the same fields, owning their arrays.
struct ShardCheckpoint {
  int32_t shard = 0;
  int32_t shards = 1;
  int64_t step = 0;
  uint64_t updates = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  std::vector<int64_t> worker_steps;
  std::vector<float> params;  // (end - begin)
  std::vector<float> m;       // (end - begin)
  std::vector<float> v;       // (end - begin)
};

// Writes `shard` to `path` atomically (see above). On failure the previous file at `path`, if
// any, is untouched and no temporary file is left behind.
Status WriteShardFile(const std::string& path, const ShardCheckpointView& shard);

// Reads and verifies (magic, version, sizes, CRC-32C) a shard file.
StatusOr<ShardCheckpoint> ReadShardFile(const std::string& path);

// Writes `bytes` to `path` atomically, the same way (used for manifests too).
Status WriteCheckpointFileAtomically(const std::string& path, const std::string& bytes);
// Reads a whole file.
StatusOr<std::string> ReadCheckpointFile(const std::string& path);

}  // namespace psformer

#endif  // PSFORMER_COMMON_CHECKPOINT_SHARD_FILE_H_
