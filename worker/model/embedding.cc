#include "worker/model/embedding.h"

#include <cmath>

namespace psformer {

template <typename T>
Embedding<T>::Embedding(Backend<T>* backend, const ParamLayout& layout, float dropout, uint32_t site)
    : be_(backend),
      d_(static_cast<int>(layout.Get("embedding").cols)),
      table_(layout.Get("embedding").offset),
      scale_(static_cast<T>(std::sqrt(static_cast<double>(d_)))),
      dropout_(backend, dropout, site) {}

template <typename T>
const T* Embedding<T>::Forward(const T* params, const int32_t* tokens, int batch, int len, const DropoutKey* key) {
  tokens_ = tokens;
  n_ = static_cast<size_t>(batch) * len;
  T* out = out_.Reserve(be_, n_ * d_);
  be_->EmbeddingForward(n_, d_, params + table_, tokens, scale_, len, out);
  return dropout_.Forward(out, n_ * d_, key);
}

template <typename T>
void Embedding<T>::Backward(const T* dout, T* grad) {
  be_->EmbeddingBackward(n_, d_, dropout_.Backward(dout), tokens_, scale_, grad + table_);
}

template <typename T>
void Embedding<T>::BackwardInto(const T* dout, const int32_t* ids, T* rows) {
  be_->EmbeddingBackward(n_, d_, dropout_.Backward(dout), ids, scale_, rows);
}

template class Embedding<float>;
template class Embedding<double>;

}  // namespace psformer
