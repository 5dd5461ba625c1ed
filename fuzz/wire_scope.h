// The job the wire fuzzer's messages are judged in, shared with the seed corpus so that the
// seeds are valid messages of it: 2 workers, 2 shards of a 40-element vector, this is shard 1.
#ifndef PSFORMER_FUZZ_WIRE_SCOPE_H_
#define PSFORMER_FUZZ_WIRE_SCOPE_H_

#include "common/param_layout.h"
#include "pserver/wire/message_validator.h"

namespace psformer::fuzz {

constexpr uint64_t kJobId = 42;
constexpr uint64_t kTotal = 40;
constexpr int kShards = 2;
constexpr int kShard = 1;

inline ServerScope FuzzServerScope() {
  const ShardRange r = ShardOf(kTotal, kShards, kShard);
  ServerScope s;
  s.job_id = kJobId;
  s.workers = 2;
  s.shard = kShard;
  s.begin = r.begin;
  s.end = r.end;
  return s;
}

// The same shard in two pieces, [20, 30) and [30, 40), the first a piece of the shared embedding
// pushed in two parts (cluster.split_embedding): where DENSE and ROWS pushes are accepted.
inline ServerScope FuzzSplitServerScope() {
  ServerScope s = FuzzServerScope();
  s.piece_bounds = {s.begin, s.begin + 10, s.end};
  s.split_pieces = {1, 0};
  return s;
}

inline ClientScope FuzzClientScope() {
  ClientScope c;
  c.job_id = kJobId;
  c.shards = kShards;
  c.total = kTotal;
  return c;
}

}  // namespace psformer::fuzz

#endif  // PSFORMER_FUZZ_WIRE_SCOPE_H_
