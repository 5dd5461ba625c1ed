// The decoder's causal self-attention for step-by-step decoding (docs/paper.md, scaled dot-product
// attention): at step t each row (one hypothesis) brings one new query position; its key and
// value are appended to a cache and the query attends over positions 0..t. Keys and values of
// earlier positions are kept, never recomputed, so a step costs O(t) per row instead of O(t^2).
// Same parameters as MultiHeadAttention (prefix + w_qkv, b_qkv, w_o, b_o in ParamLayout).
//
// The cache is time-major, (steps, rows, d) = (steps, rows, heads, head_dim): a step appends one
// contiguous block, and attention over every (row, head) is one strided batched GEMM because the
// (row, head) blocks sit head_dim apart. Reorder() gathers rows when beam search keeps, copies or
// drops hypotheses. Not thread-safe.
#ifndef PSFORMER_WORKER_TRANSLATE_INCREMENTAL_SELF_ATTENTION_H_
#define PSFORMER_WORKER_TRANSLATE_INCREMENTAL_SELF_ATTENTION_H_

#include <cstdint>
#include <string>

#include "common/param_layout.h"
#include "worker/backend/backend.h"

namespace psformer {

template <typename T>
class IncrementalSelfAttention {
 public:
  // prefix: e.g. "decoder.0.self_attn.".
  IncrementalSelfAttention(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix, int heads);

  // Forgets every cached position (a new batch starts).
  void Reset() { steps_ = 0; }
  // x: (rows, d), the query-side input of position steps(). Appends that position's keys and
  // values and returns the attention output (rows, d), valid until the next Step.
  // REQUIRES: rows equals the rows of every earlier step since Reset or the last Reorder.
  const T* Step(const T* params, const T* x, int rows);
  // Row r of the cache becomes old row ids[r] for every cached position. ids: device, holds
  // steps() * new_rows entries, entry t * new_rows + r = t * old_rows + parent(r) (built by
  // IncrementalDecoder, shared by every layer).
  void Reorder(const int32_t* ids, int new_rows);
  int steps() const { return steps_; }

 private:
  // Grows `cache` to hold `needed` elements, keeping its first `keep`.
  void Grow(DeviceBuffer<T>* cache, size_t needed, size_t keep);

  Backend<T>* be_;
  int d_, heads_, head_dim_;
  uint64_t w_qkv_, b_qkv_, w_o_, b_o_;  // offsets in the flat vector
  int steps_ = 0, rows_ = 0;
  DeviceBuffer<T> keys_, values_;     // (steps, rows, d)
  DeviceBuffer<T> spare_;             // gather target, swapped with keys_/values_
  DeviceBuffer<T> qkv_;               // (rows, 3d)
  DeviceBuffer<T> query_;             // (rows, heads, head_dim)
  DeviceBuffer<T> probs_;             // (rows, heads, 1, steps)
  DeviceBuffer<int32_t> key_tokens_;  // (rows, steps), all non-pad: nothing to mask
  DeviceBuffer<T> context_;           // (rows, heads, head_dim) = (rows, d)
  DeviceBuffer<T> out_;               // (rows, d)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_INCREMENTAL_SELF_ATTENTION_H_
