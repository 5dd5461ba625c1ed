#include "worker/translate/incremental_self_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "worker/data/batch.h"
#include "worker/model/linear.h"
#include "worker/translate/cache_rows.h"

namespace psformer {

template <typename T>
IncrementalSelfAttention<T>::IncrementalSelfAttention(Backend<T>* backend, const ParamLayout& layout,
                                                      const std::string& prefix, int heads)
    : be_(backend) {
  const ParamTensor& w_qkv = layout.Get(prefix + "w_qkv");
  d_ = static_cast<int>(w_qkv.rows);
  heads_ = heads;
  PSF_CHECK(heads > 0 && d_ % heads == 0);
  head_dim_ = d_ / heads;
  w_qkv_ = w_qkv.offset;
  b_qkv_ = layout.Get(prefix + "b_qkv").offset;
  w_o_ = layout.Get(prefix + "w_o").offset;
  b_o_ = layout.Get(prefix + "b_o").offset;
}

template <typename T>
void IncrementalSelfAttention<T>::Grow(DeviceBuffer<T>* cache, size_t needed, size_t keep) {
  if (cache->size() >= needed) return;
  // Doubling keeps the copying amortised O(1) per cached element over a whole decode.
  DeviceBuffer<T> bigger = be_->template Allocate<T>(std::max(needed, 2 * cache->size()));
  if (keep > 0) be_->Copy(keep, cache->data(), bigger.data());
  *cache = std::move(bigger);
}

template <typename T>
const T* IncrementalSelfAttention<T>::Step(const T* params, const T* x, int rows) {
  if (steps_ == 0) rows_ = rows;
  PSF_CHECK(rows == rows_);
  const int d = d_, h = heads_, hd = head_dim_, t = steps_, keys = t + 1;
  const size_t block = static_cast<size_t>(rows) * d;  // one position of the cache
  Backend<T>* be = be_;
  Grow(&keys_, block * keys, block * t);
  Grow(&values_, block * keys, block * t);

  T* qkv = qkv_.Reserve(be, 3 * block);
  LinearForward(be, rows, d, 3 * d, x, params + w_qkv_, params + b_qkv_, qkv);
  // With one position per row, (rows, heads, 1, head_dim) is (rows, d): the query and the new
  // cache block come out contiguous.
  T* query = query_.Reserve(be, block);
  be->SplitHeads(qkv, 3 * d, 0, rows, 1, h, hd, query);
  be->SplitHeads(qkv, 3 * d, d, rows, 1, h, hd, keys_.data() + t * block);
  be->SplitHeads(qkv, 3 * d, 2 * d, rows, 1, h, hd, values_.data() + t * block);

  // Block (row, head) = b starts at b * head_dim in every position; positions are rows*d apart.
  const int ld_cache = static_cast<int>(block);
  const int blocks = rows * h;
  T* probs = probs_.Reserve(be, static_cast<size_t>(blocks) * keys);
  be->GemmStridedBatched(Transpose::kNo, Transpose::kYes, 1, keys, hd, T(1), query, hd, hd, keys_.data(), ld_cache, hd,
                         T(0), probs, keys, keys, blocks);
  const size_t token_count = static_cast<size_t>(rows) * keys;
  if (key_tokens_.size() < token_count) {
    key_tokens_ = be->template Allocate<int32_t>(2 * token_count);
    const std::vector<int32_t> not_pad(key_tokens_.size(), kBosId);
    key_tokens_.Upload(not_pad.data(), not_pad.size());
  }
  // Every cached position precedes the query, so the causal mask has nothing to hide.
  be->MaskedSoftmaxForward(AttentionShape{rows, h, 1, keys}, static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd))),
                           probs, key_tokens_.data(), kPadId, false, probs);
  T* context = context_.Reserve(be, block);
  be->GemmStridedBatched(Transpose::kNo, Transpose::kNo, 1, hd, keys, T(1), probs, keys, keys, values_.data(), ld_cache,
                         hd, T(0), context, hd, hd, blocks);
  T* out = out_.Reserve(be, block);
  LinearForward(be, rows, d, d, context, params + w_o_, params + b_o_, out);
  ++steps_;
  return out;
}

template <typename T>
void IncrementalSelfAttention<T>::Reorder(const int32_t* ids, int new_rows) {
  // The caches are (steps, rows, d): `ids` holds an old row for every (step, new row).
  GatherCacheRows(be_, ids, static_cast<size_t>(steps_) * new_rows, d_, &keys_, &values_, &spare_);
  rows_ = new_rows;
}

template class IncrementalSelfAttention<float>;
template class IncrementalSelfAttention<double>;

}  // namespace psformer
