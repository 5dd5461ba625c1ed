// GradientAggregator: one BSP step's pushes, summed in worker order, never arrival order, so the
// sum (and the whole run) is bitwise the same whatever order the network delivers them in.
// A push that arrives before its predecessors waits in its received frames (no copy); the sum
// advances whenever the next worker in order is present. The sum starts as a copy of worker 0's
// gradient (not 0 + g0), so one worker's sum is exactly its gradient. Each fold is split by
// elements across `threads` threads: every element still gets its additions in worker order.
//
// The last worker's fp32 push is not folded here: it stays in its frames (gradient().tail) for
// the update pass, which adds it as it reads the sum (ShardOptimizer::ApplyPiece), saving a pass
// over the piece; with one worker there is no sum at all, the update reads the push itself.
//
// Thread safety: one thread (the server loop); the folds fan out to `threads` threads.
#ifndef PSFORMER_PSERVER_SERVER_GRADIENT_AGGREGATOR_H_
#define PSFORMER_PSERVER_SERVER_GRADIENT_AGGREGATOR_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "pserver/wire/wire_message.h"

namespace psformer {

// A complete piece's gradient, as the update reads it: sum[i] + the tail's element i, or only
// one of the two when the other is null.
struct PieceGradient {
  const float* sum = nullptr;
  const WireMessage* tail = nullptr;  // fp32, validated, the piece's range
};

class GradientAggregator {
 public:
  // `n` elements per gradient, from `workers` workers.
  GradientAggregator(int workers, size_t n, int threads = 1);

  // Forgets everything and starts collecting `step`.
  void Begin(int64_t step);
  int64_t step() const { return step_; }

  // Whether worker `w`'s push of this step is already held (buffered or summed).
  bool Has(int w) const { return received_[w]; }

  // Takes worker `w`'s push. REQUIRES: the message passed validation, !Has(w).
  void Add(int w, WireMessage push);

  bool Complete() const;
  // REQUIRES: Complete(). The sum over workers in order, (g0 + g1) + g2 ..., with the last term
  // possibly still in its frames (see above). Valid until the next Add or Begin.
  PieceGradient gradient() const;
  // The update has read gradient(): the tail's frames go back to the transport (a same-host
  // sender's shared-memory slots). Complete() stays true.
  void Consumed();
  uint64_t total_tokens() const { return tokens_; }
  double loss_sum() const { return loss_; }

 private:
  void Drain();

  int64_t step_ = 0;
  std::vector<bool> received_;
  std::vector<std::optional<WireMessage>> waiting_;  // arrived ahead of their turn.
  int next_ = 0;                                     // the next worker to fold into sum_.
  bool tail_held_ = false;                           // waiting_[next_] is the last, held for the update
  size_t n_;
  std::vector<float> sum_;                           // (n), made when first needed
  int threads_;
  uint64_t tokens_ = 0;
  double loss_ = 0;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_GRADIENT_AGGREGATOR_H_
