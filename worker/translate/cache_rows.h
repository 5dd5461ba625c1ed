// Beam search reorders the decoder's attention caches at every step: row r of the new cache is
// row ids[r] of the old one (hypotheses copied, dropped or permuted).
#ifndef PSFORMER_WORKER_TRANSLATE_CACHE_ROWS_H_
#define PSFORMER_WORKER_TRANSLATE_CACHE_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "worker/backend/backend.h"

namespace psformer {

// Replaces `keys` and `values` (rows of `row_size` elements) by their rows ids[0 .. count), each
// gathered into `spare`, which is then swapped in; `spare` keeps the old buffer for next time.
template <typename T>
void GatherCacheRows(Backend<T>* be, const int32_t* ids, size_t count, int row_size, DeviceBuffer<T>* keys,
                     DeviceBuffer<T>* values, DeviceBuffer<T>* spare) {
  if (count == 0 || row_size <= 0) return;
  // The embedding lookup with scale 1 and no positions is an exact row gather on every backend.
  for (DeviceBuffer<T>* cache : {keys, values}) {
    T* target = spare->Reserve(be, count * row_size);
    be->EmbeddingForward(count, row_size, cache->data(), ids, T(1), 0, target);
    std::swap(*cache, *spare);
  }
}

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_CACHE_ROWS_H_
