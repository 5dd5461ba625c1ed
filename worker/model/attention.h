// Multi-head scaled dot-product attention (docs/paper.md): softmax(Q K^T / sqrt(d_k)) V per head,
// heads concatenated and projected by W_O. Three kinds:
//   self         (encoder): queries, keys, values from x via the fused w_qkv; padding masked.
//   causal self  (decoder): as self, and query i sees keys 0..i only.
//   cross        (decoder): queries from x (w_q), keys and values from the encoder memory (w_kv).
// Keys whose token is pad are masked everywhere.
#ifndef PSFORMER_WORKER_MODEL_ATTENTION_H_
#define PSFORMER_WORKER_MODEL_ATTENTION_H_

#include <string>

#include "common/param_layout.h"
#include "worker/backend/backend.h"
#include "worker/model/dropout.h"

namespace psformer {

enum class AttentionKind { kSelf, kCausalSelf, kCross };

template <typename T>
class MultiHeadAttention {
 public:
  // prefix: e.g. "decoder.0.cross_attn."; probs_dropout: dropout on attention probabilities.
  MultiHeadAttention(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix, AttentionKind kind,
                     int heads, float probs_dropout, uint32_t probs_site);

  // x: (batch*queries, d) query side. memory: (batch*keys, d), the key/value side (for self
  // attention pass x, with keys == queries). key_tokens: (batch, keys) ids for the padding mask.
  // x, memory and key_tokens must stay valid until Backward. Returns (batch*queries, d).
  const T* Forward(const T* params, const T* x, const T* memory, int batch, int queries, int keys,
                   const int32_t* key_tokens, const DropoutKey* key);
  // dout: (batch*queries, d). dx (batch*queries, d) is overwritten; for cross attention dmemory
  // (batch*keys, d) accumulates (ignored otherwise). Parameter gradients accumulate in grad.
  void Backward(const T* params, const T* dout, T* dx, T* dmemory, T* grad);

 private:
  Backend<T>* be_;
  AttentionKind kind_;
  int d_, heads_, head_dim_;
  // Offsets in the flat vector. Self: w_in = w_qkv (d, 3d). Cross: w_in = w_q (d, d),
  // w_kv (d, 2d).
  uint64_t w_in_, b_in_, w_kv_ = 0, b_kv_ = 0, w_o_, b_o_;
  Dropout<T> probs_dropout_;

  // Saved by Forward.
  const T* x_ = nullptr;
  const T* memory_ = nullptr;
  int batch_ = 0, queries_ = 0, keys_ = 0;
  DeviceBuffer<T> proj_q_;   // self: qkv (batch*queries, 3d); cross: q (batch*queries, d)
  DeviceBuffer<T> proj_kv_;  // cross: kv (batch*keys, 2d)
  const T* q_ = nullptr;     // Q, K, V inside the projections, rows ldq_ / ldkv_ apart
  const T* k_ = nullptr;
  const T* v_ = nullptr;
  int ldq_ = 0, ldkv_ = 0;
  DeviceBuffer<T> probs_;          // (batch, heads, queries, keys)
  const T* used_probs_ = nullptr;  // probs_ after dropout
  DeviceBuffer<T> context_;        // (batch*queries, d): heads concatenated
  DeviceBuffer<T> out_;            // (batch*queries, d)

  // Backward scratch.
  DeviceBuffer<T> dcontext_;  // (batch*queries, d)
  DeviceBuffer<T> dprobs_;    // (batch, heads, queries, keys); then the scores' gradient
  DeviceBuffer<T> dscores_;   // (batch, heads, queries, keys)
  DeviceBuffer<T> dproj_q_;   // like proj_q_
  DeviceBuffer<T> dproj_kv_;  // like proj_kv_

  // Where head j of sentence i starts in Q (and its gradient), K or V, the scores, and the context.
  BatchStrides QueryHeads() const { return {static_cast<int64_t>(queries_) * ldq_, head_dim_}; }
  BatchStrides KeyHeads() const { return {static_cast<int64_t>(keys_) * ldkv_, head_dim_}; }
  BatchStrides ScoreHeads() const {
    const int64_t per_head = static_cast<int64_t>(queries_) * keys_;
    return {per_head * heads_, per_head};
  }
  BatchStrides ContextHeads() const { return {static_cast<int64_t>(queries_) * d_, head_dim_}; }
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_ATTENTION_H_
