// GradientAggregator: one BSP step's pushes of one piece, held in their received frames (no
// copy) until every worker's is in. It sums nothing itself: the update reads them all in one
// pass (ShardOptimizer::ApplyPiece), block by block, adding the workers' shares in worker order,
// never arrival order, (g0 + g1) + g2 ..., starting from g0 itself (not 0 + g0), so the sum, and
// the whole run, is bitwise the same whatever order the network delivers them in, and one
// worker's sum is exactly its gradient. Reading every push once in the update, instead of folding
// each into a sum buffer as it comes, moves about half the bytes for 8 workers.
//
// Thread safety: one thread (the server loop).
#ifndef PSFORMER_PSERVER_SERVER_GRADIENT_AGGREGATOR_H_
#define PSFORMER_PSERVER_SERVER_GRADIENT_AGGREGATOR_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "pserver/wire/gradient_rows.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

// A piece's gradient as the update reads it: sum[i] (when not null), then each part's element i
// added in order; without a sum the first part's element is the start.
// With `rows` (a piece of the shared embedding pushed in two parts, gradient_rows.h), the parts
// are the DENSE ones, and the ROWS parts' sum is added after theirs.
struct PieceGradient {
  const float* sum = nullptr;
  std::vector<const WireMessage*> parts;  // validated, the piece's range, FLOAT32 or BFLOAT16
  std::vector<const RowsGradient*> rows;  // validated ROWS parts, in worker order
};

// Elements a pass over a piece's gradient takes at a time: a block of the sum and what the pass
// does with it next (the update's five fp32 streams, or a host group's sum's bf16 copy and its
// CRC) stay in the L2 cache.
constexpr size_t kSumBlock = 8192;

// The worker-order sum, the one place it is written: out[0, end - begin) = elements
// [begin, end) of g, sum[i] (when there is one) + part 0 + part 1 + ... in that order, or part 0
// itself, then + part 1, ... without a sum. Both the servers' update (ShardOptimizer) and a host
// group's sum (HostAggregator) add with it, which is why a host group of all workers gives the
// flat job's sum bit for bit. Then the ROWS parts, if any: out += their sum (AddRowsInOrder).
// REQUIRES: g.sum or g.parts; [begin, end) within the piece.
void SumInWorkerOrder(const PieceGradient& g, size_t begin, size_t end, float* out);

// What each worker pushes of a piece (proto::PushPart): one WHOLE push; a DENSE and a ROWS push
// (a piece of the shared embedding with cluster.split_embedding, at its server); or one of those
// parts alone (a host group's aggregator collects and sums each part of such a piece on its own).
enum class PartsTaken { kWhole, kDenseAndRows, kDense, kRows };

class GradientAggregator {
 public:
  // Pushes of `n` elements from `workers` workers, each worker's in the parts `parts` says.
  GradientAggregator(int workers, size_t n, PartsTaken parts = PartsTaken::kWhole);
  // Whether a push of `part` belongs here.
  bool Takes(proto::PushPart part) const;

  // Forgets everything (releasing held frames) and starts collecting `step`.
  void Begin(int64_t step);
  int64_t step() const { return step_; }

  // Whether worker `w`'s push (of that part) of this step is already in (held, or read by the
  // update). REQUIRES: Takes(part).
  bool Has(int w, proto::PushPart part = proto::WHOLE) const {
    return complete_ || (part == proto::ROWS ? rows_[w].has_value() : waiting_[w].has_value());
  }

  // Takes worker `w`'s push. REQUIRES: the message passed validation, Takes(its part), !Has(w,
  // its part).
  void Add(int w, WireMessage push);

  // Every worker's push is in (or was, before Consumed).
  bool Complete() const { return complete_; }
  // A split piece whose every worker's DENSE part is in, each naming its rows (proto::Header
  // named): every element outside the named runs, and outside the ROWS parts already held, has its
  // whole gradient in the DENSE parts, and may be updated now (BspPolicy). The mask is those runs,
  // merged; nullopt while some DENSE part is missing or names nothing.
  std::optional<std::vector<ElementRun>> EarlyMask() const;
  // The union of what every worker's DENSE part named, merged; nullopt while some DENSE part is
  // missing or names nothing (a host group's sum names this).
  std::optional<std::vector<ElementRun>> NamedUnion() const;
  // Whether worker `w`'s ROWS part, `rows`, lies inside what its DENSE part named (true when that
  // part named nothing or is not in).
  bool RowsInsideNamed(int w, std::span<const ElementRun> rows) const;
  // REQUIRES: EarlyMask(). The DENSE parts in worker order, and their totals.
  PieceGradient dense_gradient() const;
  // REQUIRES: Complete() and not yet Consumed. The pushes in worker order; valid until Consumed,
  // the next Add or Begin.
  PieceGradient gradient() const;
  // Forgets worker `w`'s WHOLE or DENSE push, found damaged after it was taken (a host
  // aggregator checks the shares' CRCs in its summing pass): the piece waits for it again.
  // REQUIRES: it is held and not Consumed.
  void Drop(int w);
  // The update has read gradient(): the frames go back to the transport (a same-host sender's
  // shared-memory slots). Complete() stays true.
  void Consumed();

  // Sums over the workers' pushes (of one part: every part carries the same), in worker order.
  // REQUIRES: Complete().
  uint64_t total_tokens() const { return tokens_; }
  double loss_sum() const { return loss_; }

 private:
  int64_t step_ = 0;
  size_t n_;
  PartsTaken parts_;
  std::vector<std::optional<WireMessage>> waiting_;  // (workers) WHOLE or DENSE, when taken
  std::vector<std::optional<std::vector<ElementRun>>> named_;  // (workers) what a DENSE part named, merged
  int waiting_held_ = 0;                                       // of waiting_
  struct HeldRows {
    WireMessage message;  // owns the frames
    RowsGradient rows;    // views of them
  };
  std::vector<std::optional<HeldRows>> rows_;  // (workers) ROWS, when taken
  int held_ = 0;                               // messages held; complete at waiting_ + rows_'s sizes
  bool complete_ = false;
  uint64_t tokens_ = 0;
  double loss_ = 0;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_GRADIENT_AGGREGATOR_H_
