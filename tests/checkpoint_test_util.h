// Shard checkpoints for tests that write them by hand (checkpoint files, averaging).
#ifndef PSFORMER_TESTS_CHECKPOINT_TEST_UTIL_H_
#define PSFORMER_TESTS_CHECKPOINT_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "common/checkpoint/shard_file.h"
#include "common/param_layout.h"

namespace psformer::testing {

// What shard `shard` of `shards` (over `parameter_count` elements) holds after `step` updates,
// each of `workers` workers at `step`; the arrays are the caller's, of the shard's size.
inline ShardCheckpointView ShardViewAtStep(uint64_t parameter_count, int shard, int shards, int64_t step, int workers,
                                           const float* params, const float* m, const float* v) {
  const ShardRange r = ShardOf(parameter_count, shards, shard);
  return ShardCheckpointView{.shard = shard,
                             .shards = shards,
                             .step = step,
                             .updates = static_cast<uint64_t>(step),
                             .begin = r.begin,
                             .end = r.end,
                             .worker_steps = std::vector<int64_t>(workers, step),
                             .params = params,
                             .m = m,
                             .v = v,
                             .midway = nullptr};
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_CHECKPOINT_TEST_UTIL_H_
