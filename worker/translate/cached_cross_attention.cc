#include "worker/translate/cached_cross_attention.h"

#include <cmath>
#include <utility>

#include "common/logging.h"
#include "worker/data/batch.h"
#include "worker/model/linear.h"
#include "worker/translate/cache_rows.h"

namespace psformer {

template <typename T>
CachedCrossAttention<T>::CachedCrossAttention(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix,
                                              int heads)
    : be_(backend) {
  const ParamTensor& w_q = layout.Get(prefix + "w_q");
  d_ = static_cast<int>(w_q.rows);
  heads_ = heads;
  PSF_CHECK(heads > 0 && d_ % heads == 0);
  head_dim_ = d_ / heads;
  w_q_ = w_q.offset;
  b_q_ = layout.Get(prefix + "b_q").offset;
  w_kv_ = layout.Get(prefix + "w_kv").offset;
  b_kv_ = layout.Get(prefix + "b_kv").offset;
  w_o_ = layout.Get(prefix + "w_o").offset;
  b_o_ = layout.Get(prefix + "b_o").offset;
}

template <typename T>
void CachedCrossAttention<T>::Prepare(const T* params, const T* memory, int rows, int src_len) {
  rows_ = rows;
  src_len_ = src_len;
  const int d = d_, n = rows * src_len;
  Backend<T>* be = be_;
  T* kv = kv_.Reserve(be, static_cast<size_t>(n) * 2 * d);
  LinearForward(be, n, d, 2 * d, memory, params + w_kv_, params + b_kv_, kv);
  be->SplitHeads(kv, 2 * d, 0, rows, src_len, heads_, head_dim_, keys_.Reserve(be, static_cast<size_t>(n) * d));
  be->SplitHeads(kv, 2 * d, d, rows, src_len, heads_, head_dim_, values_.Reserve(be, static_cast<size_t>(n) * d));
}

template <typename T>
const T* CachedCrossAttention<T>::Step(const T* params, const T* x, const int32_t* src_tokens) {
  const int d = d_, h = heads_, hd = head_dim_, rows = rows_, keys = src_len_, blocks = rows * h;
  const size_t block = static_cast<size_t>(rows) * d;
  const int64_t head_stride = static_cast<int64_t>(keys) * hd;  // one (row, head) of keys_/values_
  Backend<T>* be = be_;
  // (rows, d) is (rows, heads, 1, head_dim): the projected queries need no split.
  T* query = query_.Reserve(be, block);
  LinearForward(be, rows, d, d, x, params + w_q_, params + b_q_, query);
  T* probs = probs_.Reserve(be, static_cast<size_t>(blocks) * keys);
  be->GemmStridedBatched(Transpose::kNo, Transpose::kYes, 1, keys, hd, T(1), query, hd, hd, keys_.data(), hd,
                         head_stride, T(0), probs, keys, keys, blocks);
  be->MaskedSoftmaxForward(AttentionShape{rows, h, 1, keys}, static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd))),
                           probs, src_tokens, kPadId, false, probs);
  T* context = context_.Reserve(be, block);
  be->GemmStridedBatched(Transpose::kNo, Transpose::kNo, 1, hd, keys, T(1), probs, keys, keys, values_.data(), hd,
                         head_stride, T(0), context, hd, hd, blocks);
  T* out = out_.Reserve(be, block);
  LinearForward(be, rows, d, d, context, params + w_o_, params + b_o_, out);
  return out;
}

template <typename T>
void CachedCrossAttention<T>::Reorder(const int32_t* parents, int new_rows) {
  const int row_size = src_len_ * d_;  // one row's keys (or values), every head
  if (new_rows > 0) GatherCacheRows(be_, parents, static_cast<size_t>(new_rows), row_size, &keys_, &values_, &spare_);
  rows_ = new_rows;
}

template class CachedCrossAttention<float>;
template class CachedCrossAttention<double>;

}  // namespace psformer
