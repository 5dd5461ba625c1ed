// The decoder's attention over the encoder output for step-by-step decoding: the keys and values
// come from the source only, so they are projected once per batch (Prepare) and every step only
// projects its new queries. Same parameters as MultiHeadAttention's cross kind (prefix + w_q,
// b_q, w_kv, b_kv, w_o, b_o); source pad positions are masked as in training.
// Rows are hypotheses; Reorder() makes row r a copy of an earlier row (beam search). Not
// thread-safe.
#ifndef PSFORMER_WORKER_TRANSLATE_CACHED_CROSS_ATTENTION_H_
#define PSFORMER_WORKER_TRANSLATE_CACHED_CROSS_ATTENTION_H_

#include <cstdint>
#include <string>

#include "common/param_layout.h"
#include "worker/backend/backend.h"

namespace psformer {

template <typename T>
class CachedCrossAttention {
 public:
  // prefix: e.g. "decoder.0.cross_attn.".
  CachedCrossAttention(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix, int heads);

  // memory: (rows, src_len, d), the encoder output, one row per sentence. Projects and keeps its
  // keys and values; memory need not stay valid afterwards.
  void Prepare(const T* params, const T* memory, int rows, int src_len);
  // x: (rows, d) queries of one position; src_tokens: (rows, src_len) on the device, for the
  // padding mask, valid during the call. Returns (rows, d), valid until the next Step.
  const T* Step(const T* params, const T* x, const int32_t* src_tokens);
  // Row r becomes old row parents[r]; parents: device, (new_rows).
  void Reorder(const int32_t* parents, int new_rows);
  int rows() const { return rows_; }

 private:
  Backend<T>* be_;
  int d_, heads_, head_dim_;
  uint64_t w_q_, b_q_, w_kv_, b_kv_, w_o_, b_o_;  // offsets in the flat vector
  int rows_ = 0, src_len_ = 0;
  DeviceBuffer<T> kv_;             // (rows*src_len, 2d): projection scratch
  DeviceBuffer<T> keys_, values_;  // (rows, heads, src_len, head_dim)
  DeviceBuffer<T> spare_;          // gather target
  DeviceBuffer<T> query_;          // (rows, d) = (rows, heads, 1, head_dim)
  DeviceBuffer<T> probs_;          // (rows, heads, 1, src_len)
  DeviceBuffer<T> context_;        // (rows, d)
  DeviceBuffer<T> out_;            // (rows, d)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_CACHED_CROSS_ATTENTION_H_
