// ShardOptimizer: one shard's fp32 parameters and Adam moments, and the update applied to them.
// The learning rate comes from the paper's schedule at the step the gradient belongs to; Adam's
// bias correction counts updates applied (in BSP one per step, so the two agree; in SSP and async
// every push is an update).
//
// An update may be applied piece by piece (BSP with overlap: each piece as soon as every worker's
// share of it is in): ApplyPiece for each piece of the shard, in any order, then FinishStep.
// Pulls are served from snapshots, never from the live parameters: the snapshot of the last
// finished update (complete), and the one the update in progress is filling piece by piece
// (each piece readable once applied), so a reply still being sent never sees a later update.
// Snapshots live in memory from the server's Van (Van::AllocatePayload): on the same-host path
// that is shared memory, which every same-host worker's pull reads in place (the snapshot is
// published once per update, not copied per reply). A snapshot is reused only once nothing
// refers to it any more, a reply on loan to a worker included.
//
// Each piece's update is one pass, split across `threads` threads (ParallelFor): the gradient's
// normalisation, Adam, the snapshot copy (and its bf16 rounding when the job pulls bf16) and
// their CRC-32Cs, block by block while a block is in cache. Every float is computed elementwise,
// so neither the split into pieces nor into threads changes a result; CRCs are kept per piece
// and combined for a run of pieces.
//
// Thread safety: one thread (the server loop); the passes fan out to `threads` threads.
#ifndef PSFORMER_PSERVER_SERVER_SHARD_OPTIMIZER_H_
#define PSFORMER_PSERVER_SERVER_SHARD_OPTIMIZER_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/adam.h"
#include "common/checkpoint/shard_file.h"
#include "common/proto/config.pb.h"
#include "common/transport/van.h"
#include "pserver/server/gradient_aggregator.h"

namespace psformer {

// Read-only bytes of a snapshot, kept alive by `owner`, with their CRC-32C.
struct SnapshotSlice {
  std::shared_ptr<const void> owner;
  const void* data = nullptr;
  size_t bytes = 0;
  uint32_t crc32c = 0;
};

// Where snapshots live: bytes -> memory (Van::AllocatePayload).
using PayloadAllocator = std::function<std::shared_ptr<void>(size_t bytes)>;

class ShardOptimizer {
 public:
  // Elements [begin, end) of the flat vector; `config` supplies optimizer and schedule.
  // `piece_starts`: where the shard's pieces begin, relative to `begin` (empty: one piece).
  // `allocate`: memory for snapshots (null: the heap).
  ShardOptimizer(const proto::JobConfig& config, uint64_t begin, uint64_t end, int threads,
                 std::vector<uint64_t> piece_starts = {}, PayloadAllocator allocate = nullptr);

  // Fills the parameters with init(begin, end, out); moments to zero.
  void Initialize(const std::function<void(uint64_t, uint64_t, float*)>& init);
  // Takes parameters, moments and update count from a loaded checkpoint of this range.
  void Restore(ShardCheckpoint checkpoint);

  // One Adam update for step `step` with gradient `grad` (size()), divided on the way by
  // target_tokens when that is > 0 (exactly NormalizeGradient's division; 0 = already normalised):
  // ApplyPiece over the whole shard, then FinishStep.
  void Apply(int64_t step, const float* grad, uint64_t target_tokens = 0);
  // Applies step `step`'s update to piece `piece` (an index into piece_starts) with its gradient
  // (the piece's elements: the workers' pushes, summed in the same pass). REQUIRES: each piece
  // at most once between FinishSteps.
  void ApplyPiece(int64_t step, int piece, const PieceGradient& grad, uint64_t target_tokens);
  // The same update of piece `piece` in two passes (a split piece whose rows were named up front,
  // BspPolicy): first every element outside `named` (ascending, disjoint runs of piece offsets)
  // with `grad` the DENSE parts alone, then (inside = true) the elements of `named` with the whole
  // gradient. Each element is computed as ApplyPiece computes it, so the two passes give its bits.
  // The piece's snapshot CRC is made when a pull first needs it; PartSlice serves each part.
  // REQUIRES: the outside pass first, the same `named` for both, each once between FinishSteps.
  void ApplyPieceRuns(int64_t step, int piece, const PieceGradient& grad, uint64_t target_tokens,
                      const std::vector<ElementRun>& named, bool inside);
  // Every piece has been applied: counts the update and makes its snapshot the complete one.
  void FinishStep();
  // Pieces applied since the last FinishStep, or half applied (ApplyPieceRuns' first pass):
  // checkpoints wait for 0, the moments being live.
  int pieces_in_progress() const { return pieces_applied_ + pieces_half_applied_; }

  uint64_t size() const { return params_.size(); }
  int piece_count() const { return static_cast<int>(piece_starts_.size()); }
  // The piece that starts at shard offset `offset`, or -1.
  int PieceStartingAt(uint64_t offset) const {
    const auto it = std::lower_bound(piece_starts_.begin(), piece_starts_.end(), offset);
    return it != piece_starts_.end() && *it == offset ? static_cast<int>(it - piece_starts_.begin()) : -1;
  }
  uint64_t updates() const { return updates_; }
  const float* params() const { return params_.data(); }  // (size())
  const float* m() const { return m_.data(); }            // (size())
  const float* v() const { return v_.data(); }            // (size())

  // Which state a pull reads.
  enum class Version {
    kPrevious,    // after the update before the last finished one (REQUIRES: has_previous())
    kCurrent,     // after the last finished update
    kInProgress,  // as the update in progress has made it (REQUIRES: those pieces applied)
  };
  // Elements [begin, end) (shard offsets) of the parameters of `version`, in fp32 or rounded to
  // bf16. A run of whole pieces is served without a copy and with its CRC known (bf16: rounded
  // once per update, in the update's pass when the job pulls bf16); any other range is copied.
  SnapshotSlice Slice(Version version, bool bf16, uint64_t begin, uint64_t end);
  // One part of piece `piece` of `version` (proto::DENSE: the elements outside the runs its update
  // named, proto::ROWS: those), as PARAMS of a part carry it (gradient_rows.h): a table frame of
  // the named runs, then the part's values. `runs` gets the table's length. A piece updated in one
  // pass named nothing: its DENSE part is the whole piece (Slice's, no copy), its ROWS part empty.
  // REQUIRES: that part of the piece applied (the ROWS part: the whole piece).
  SnapshotSlice PartSlice(Version version, bool bf16, int piece, proto::PushPart part, uint32_t* runs);
  // Whether the state before the last finished update is still kept: until the next update
  // starts, for a restarted worker that must recompute that update's step (BSP servers may stand
  // one step apart while a dead worker's push had reached only some of them).
  bool has_previous() const { return previous_ != nullptr; }

 private:
  template <typename T>
  struct Array {  // elements in memory from allocate_
    std::shared_ptr<void> memory;
    T* data() const { return static_cast<T*>(memory.get()); }
  };
  struct Snapshot {
    Array<float> values;      // (size())
    Array<uint16_t> rounded;  // (size()) when bf16 was made
    bool has_rounded = false;
    std::vector<uint32_t> crc, crc16;  // per piece
    // Per piece: the runs updated in a second pass (ApplyPieceRuns; empty: one pass), whether its
    // CRCs are still to be made (Slice makes them), and its parts' payloads once made.
    std::vector<std::vector<ElementRun>> named;
    std::vector<uint8_t> crc_stale;
    std::vector<std::array<std::shared_ptr<const SnapshotSlice>, 4>> parts;  // [part - 1][bf16]
  };
  // Makes the CRCs of piece `piece` of `s` (after a two-pass update).
  void MakeCrcs(Snapshot* s, int piece);
  // The fused pass over elements [b, e) of piece offset `offset`: sum, Adam, snapshot (and bf16).
  void UpdateRange(const AdamStepConstants& k, const PieceGradient& grad, float tokens, size_t offset, size_t b,
                   size_t e, float* block);
  std::shared_ptr<Snapshot> FreshSnapshot();
  // The snapshot a pull of `version` reads (null when there is none).
  std::shared_ptr<Snapshot> SnapshotOf(Version version);
  // The complete snapshot, made from the parameters if there is none yet (after Initialize or
  // Restore).
  const std::shared_ptr<Snapshot>& Current();
  void Round(Snapshot* s);  // fills rounded and crc16 of a complete snapshot
  uint64_t PieceEnd(int piece) const { return piece + 1 < piece_count() ? piece_starts_[piece + 1] : params_.size(); }

  template <typename T>
  Array<T> Allocate() const {
    return Array<T>{allocate_(params_.size() * sizeof(T))};
  }

  const proto::JobConfig& config_;
  PayloadAllocator allocate_;
  AdamHyper hyper_;
  int threads_;
  bool bf16_pulls_;  // cluster.param_dtype BF16: the update pass rounds too
  std::vector<uint64_t> piece_starts_;
  uint64_t updates_ = 0;
  int pieces_applied_ = 0;
  int pieces_half_applied_ = 0;        // outside passes whose inside pass is still to come
  std::vector<float> params_, m_, v_;  // (end - begin) each
  std::shared_ptr<Snapshot> current_, next_;
  std::shared_ptr<Snapshot> previous_;  // the one before current_; reused by the next update
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_SHARD_OPTIMIZER_H_
