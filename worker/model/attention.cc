#include "worker/model/attention.h"

#include <cmath>

#include "worker/data/batch.h"
#include "worker/model/linear.h"

namespace psformer {

template <typename T>
MultiHeadAttention<T>::MultiHeadAttention(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix,
                                          AttentionKind kind, int heads, float probs_dropout, uint32_t probs_site)
    : be_(backend), kind_(kind), probs_dropout_(backend, probs_dropout, probs_site) {
  const bool cross = kind == AttentionKind::kCross;
  const ParamTensor& w_in = layout.Get(prefix + (cross ? "w_q" : "w_qkv"));
  d_ = static_cast<int>(w_in.rows);
  heads_ = heads;
  head_dim_ = d_ / heads;
  w_in_ = w_in.offset;
  b_in_ = layout.Get(prefix + (cross ? "b_q" : "b_qkv")).offset;
  if (cross) {
    w_kv_ = layout.Get(prefix + "w_kv").offset;
    b_kv_ = layout.Get(prefix + "b_kv").offset;
  }
  w_o_ = layout.Get(prefix + "w_o").offset;
  b_o_ = layout.Get(prefix + "b_o").offset;
}

template <typename T>
const T* MultiHeadAttention<T>::Forward(const T* params, const T* x, const T* memory, int batch, int queries, int keys,
                                        const int32_t* key_tokens, const DropoutKey* key) {
  x_ = x;
  memory_ = memory;
  batch_ = batch;
  queries_ = queries;
  keys_ = keys;
  const int nq = batch * queries, nk = batch * keys, d = d_, h = heads_, hd = head_dim_;
  Backend<T>* be = be_;
  T* q = q_.Reserve(be, static_cast<size_t>(nq) * d);
  T* k = k_.Reserve(be, static_cast<size_t>(nk) * d);
  T* v = v_.Reserve(be, static_cast<size_t>(nk) * d);
  if (kind_ == AttentionKind::kCross) {
    T* pq = proj_q_.Reserve(be, static_cast<size_t>(nq) * d);
    T* pkv = proj_kv_.Reserve(be, static_cast<size_t>(nk) * 2 * d);
    LinearForward(be, nq, d, d, x, params + w_in_, params + b_in_, pq);
    LinearForward(be, nk, d, 2 * d, memory, params + w_kv_, params + b_kv_, pkv);
    be->SplitHeads(pq, d, 0, batch, queries, h, hd, q);
    be->SplitHeads(pkv, 2 * d, 0, batch, keys, h, hd, k);
    be->SplitHeads(pkv, 2 * d, d, batch, keys, h, hd, v);
  } else {
    T* qkv = proj_q_.Reserve(be, static_cast<size_t>(nq) * 3 * d);
    LinearForward(be, nq, d, 3 * d, x, params + w_in_, params + b_in_, qkv);
    be->SplitHeads(qkv, 3 * d, 0, batch, queries, h, hd, q);
    be->SplitHeads(qkv, 3 * d, d, batch, keys, h, hd, k);
    be->SplitHeads(qkv, 3 * d, 2 * d, batch, keys, h, hd, v);
  }
  const size_t score_size = static_cast<size_t>(batch) * h * queries * keys;
  T* probs = probs_.Reserve(be, score_size);
  // Scores go into probs, then the softmax runs in place row by row.
  be->GemmStridedBatched(Transpose::kNo, Transpose::kYes, queries, keys, hd, T(1), q, hd,
                         static_cast<int64_t>(queries) * hd, k, hd, static_cast<int64_t>(keys) * hd, T(0), probs, keys,
                         static_cast<int64_t>(queries) * keys, batch * h);
  const AttentionShape shape{batch, h, queries, keys};
  be->MaskedSoftmaxForward(shape, static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd))), probs, key_tokens, kPadId,
                           kind_ == AttentionKind::kCausalSelf, probs);
  used_probs_ = probs_dropout_.Forward(probs, score_size, key);
  // Per-head context into dctx_heads_-shaped scratch, then merged into (nq, d).
  T* ctx_heads = dctx_heads_.Reserve(be, static_cast<size_t>(nq) * d);
  be->GemmStridedBatched(Transpose::kNo, Transpose::kNo, queries, hd, keys, T(1), used_probs_, keys,
                         static_cast<int64_t>(queries) * keys, v, hd, static_cast<int64_t>(keys) * hd, T(0), ctx_heads,
                         hd, static_cast<int64_t>(queries) * hd, batch * h);
  T* context = context_.Reserve(be, static_cast<size_t>(nq) * d);
  be->MergeHeads(ctx_heads, batch, queries, h, hd, context, d, 0);
  T* out = out_.Reserve(be, static_cast<size_t>(nq) * d);
  LinearForward(be, nq, d, d, context, params + w_o_, params + b_o_, out);
  return out;
}

template <typename T>
void MultiHeadAttention<T>::Backward(const T* params, const T* dout, T* dx, T* dmemory, T* grad) {
  const int batch = batch_, queries = queries_, keys = keys_, nq = batch * queries, nk = batch * keys;
  const int d = d_, h = heads_, hd = head_dim_;
  Backend<T>* be = be_;
  T* dcontext = dcontext_.Reserve(be, static_cast<size_t>(nq) * d);
  LinearBackward(be, nq, d, d, context_.data(), params + w_o_, dout, dcontext, false, grad + w_o_, grad + b_o_);
  T* dctx_heads = dctx_heads_.Reserve(be, static_cast<size_t>(nq) * d);
  be->SplitHeads(dcontext, d, 0, batch, queries, h, hd, dctx_heads);

  const size_t score_size = static_cast<size_t>(batch) * h * queries * keys;
  const int64_t sq = static_cast<int64_t>(queries) * hd, sk = static_cast<int64_t>(keys) * hd;
  const int64_t ss = static_cast<int64_t>(queries) * keys;
  T* dprobs = dprobs_.Reserve(be, score_size);
  T* dv = dv_.Reserve(be, static_cast<size_t>(nk) * d);
  // dP = dC V^T; dV = P^T dC (P after dropout, as the forward used it).
  be->GemmStridedBatched(Transpose::kNo, Transpose::kYes, queries, keys, hd, T(1), dctx_heads, hd, sq, v_.data(), hd,
                         sk, T(0), dprobs, keys, ss, batch * h);
  be->GemmStridedBatched(Transpose::kYes, Transpose::kNo, keys, hd, queries, T(1), used_probs_, keys, ss, dctx_heads,
                         hd, sq, T(0), dv, hd, sk, batch * h);
  const T* dprobs_before_dropout = probs_dropout_.Backward(dprobs);
  T* dscores = dscores_.Reserve(be, score_size);
  be->SoftmaxBackward(AttentionShape{batch, h, queries, keys}, static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd))),
                      probs_.data(), dprobs_before_dropout, dscores);
  T* dq = dq_.Reserve(be, static_cast<size_t>(nq) * d);
  T* dk = dk_.Reserve(be, static_cast<size_t>(nk) * d);
  // dQ = dS K; dK = dS^T Q.
  be->GemmStridedBatched(Transpose::kNo, Transpose::kNo, queries, hd, keys, T(1), dscores, keys, ss, k_.data(), hd, sk,
                         T(0), dq, hd, sq, batch * h);
  be->GemmStridedBatched(Transpose::kYes, Transpose::kNo, keys, hd, queries, T(1), dscores, keys, ss, q_.data(), hd, sq,
                         T(0), dk, hd, sk, batch * h);

  if (kind_ == AttentionKind::kCross) {
    T* dpq = dproj_q_.Reserve(be, static_cast<size_t>(nq) * d);
    T* dpkv = dproj_kv_.Reserve(be, static_cast<size_t>(nk) * 2 * d);
    be->MergeHeads(dq, batch, queries, h, hd, dpq, d, 0);
    be->MergeHeads(dk, batch, keys, h, hd, dpkv, 2 * d, 0);
    be->MergeHeads(dv, batch, keys, h, hd, dpkv, 2 * d, d);
    LinearBackward(be, nq, d, d, x_, params + w_in_, dpq, dx, false, grad + w_in_, grad + b_in_);
    LinearBackward(be, nk, d, 2 * d, memory_, params + w_kv_, dpkv, dmemory, true, grad + w_kv_, grad + b_kv_);
  } else {
    T* dqkv = dproj_q_.Reserve(be, static_cast<size_t>(nq) * 3 * d);
    be->MergeHeads(dq, batch, queries, h, hd, dqkv, 3 * d, 0);
    be->MergeHeads(dk, batch, keys, h, hd, dqkv, 3 * d, d);
    be->MergeHeads(dv, batch, keys, h, hd, dqkv, 3 * d, 2 * d);
    LinearBackward(be, nq, d, 3 * d, x_, params + w_in_, dqkv, dx, false, grad + w_in_, grad + b_in_);
  }
}

template class MultiHeadAttention<float>;
template class MultiHeadAttention<double>;

}  // namespace psformer
