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
  // Q, K and V stay where the projections put them: head j of sentence i is the block of rows
  // i*len.. and columns j*hd.. (plus the column of Q, K or V) of a (rows, ld) matrix, which the
  // batched products read in place, so no heads are copied out and back.
  if (kind_ == AttentionKind::kCross) {
    T* pq = proj_q_.Reserve(be, static_cast<size_t>(nq) * d);
    T* pkv = proj_kv_.Reserve(be, static_cast<size_t>(nk) * 2 * d);
    LinearForward(be, nq, d, d, x, params + w_in_, params + b_in_, pq);
    LinearForward(be, nk, d, 2 * d, memory, params + w_kv_, params + b_kv_, pkv);
    q_ = pq;
    k_ = pkv;
    v_ = pkv + d;
    ldq_ = d;
    ldkv_ = 2 * d;
  } else {
    T* qkv = proj_q_.Reserve(be, static_cast<size_t>(nq) * 3 * d);
    LinearForward(be, nq, d, 3 * d, x, params + w_in_, params + b_in_, qkv);
    q_ = qkv;
    k_ = qkv + d;
    v_ = qkv + 2 * d;
    ldq_ = ldkv_ = 3 * d;
  }
  const size_t score_size = static_cast<size_t>(batch) * h * queries * keys;
  T* probs = probs_.Reserve(be, score_size);
  // Scores go into probs, then the softmax runs in place row by row.
  be->GemmBatched2(Transpose::kNo, Transpose::kYes, queries, keys, hd, T(1), q_, ldq_, QueryHeads(), k_, ldkv_,
                   KeyHeads(), T(0), probs, keys, ScoreHeads(), batch, h);
  const AttentionShape shape{batch, h, queries, keys};
  be->MaskedSoftmaxForward(shape, static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd))), probs, key_tokens, kPadId,
                           kind_ == AttentionKind::kCausalSelf, probs);
  used_probs_ = probs_dropout_.Forward(probs, score_size, key);
  // Each head's context goes straight into its columns of (nq, d): the heads come out concatenated.
  T* context = context_.Reserve(be, static_cast<size_t>(nq) * d);
  be->GemmBatched2(Transpose::kNo, Transpose::kNo, queries, hd, keys, T(1), used_probs_, keys, ScoreHeads(), v_, ldkv_,
                   KeyHeads(), T(0), context, d, ContextHeads(), batch, h);
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

  // The gradients of Q, K and V go into the projections' gradient in the forward's layout.
  T *dq, *dk, *dv;
  if (kind_ == AttentionKind::kCross) {
    dq = dproj_q_.Reserve(be, static_cast<size_t>(nq) * d);
    dk = dproj_kv_.Reserve(be, static_cast<size_t>(nk) * 2 * d);
    dv = dk + d;
  } else {
    dq = dproj_q_.Reserve(be, static_cast<size_t>(nq) * 3 * d);
    dk = dq + d;
    dv = dq + 2 * d;
  }
  const size_t score_size = static_cast<size_t>(batch) * h * queries * keys;
  T* dprobs = dprobs_.Reserve(be, score_size);
  // dP = dC V^T; dV = P^T dC (P after dropout, as the forward used it).
  be->GemmBatched2(Transpose::kNo, Transpose::kYes, queries, keys, hd, T(1), dcontext, d, ContextHeads(), v_, ldkv_,
                   KeyHeads(), T(0), dprobs, keys, ScoreHeads(), batch, h);
  be->GemmBatched2(Transpose::kYes, Transpose::kNo, keys, hd, queries, T(1), used_probs_, keys, ScoreHeads(), dcontext,
                   d, ContextHeads(), T(0), dv, ldkv_, KeyHeads(), batch, h);
  const T* dprobs_before_dropout = probs_dropout_.Backward(dprobs);
  T* dscores = dscores_.Reserve(be, score_size);
  be->SoftmaxBackward(AttentionShape{batch, h, queries, keys}, static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd))),
                      probs_.data(), dprobs_before_dropout, dscores);
  // dQ = dS K; dK = dS^T Q.
  be->GemmBatched2(Transpose::kNo, Transpose::kNo, queries, hd, keys, T(1), dscores, keys, ScoreHeads(), k_, ldkv_,
                   KeyHeads(), T(0), dq, ldq_, QueryHeads(), batch, h);
  be->GemmBatched2(Transpose::kYes, Transpose::kNo, keys, hd, queries, T(1), dscores, keys, ScoreHeads(), q_, ldq_,
                   QueryHeads(), T(0), dk, ldkv_, KeyHeads(), batch, h);

  if (kind_ == AttentionKind::kCross) {
    LinearBackward(be, nq, d, d, x_, params + w_in_, dq, dx, false, grad + w_in_, grad + b_in_);
    LinearBackward(be, nk, d, 2 * d, memory_, params + w_kv_, dk, dmemory, true, grad + w_kv_, grad + b_kv_);
  } else {
    LinearBackward(be, nq, d, 3 * d, x_, params + w_in_, dq, dx, false, grad + w_in_, grad + b_in_);
  }
}

template class MultiHeadAttention<float>;
template class MultiHeadAttention<double>;

}  // namespace psformer
