#include "worker/model/layer_norm.h"

namespace psformer {

template <typename T>
LayerNorm<T>::LayerNorm(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix)
    : be_(backend),
      d_(static_cast<int>(layout.Get(prefix + "gamma").cols)),
      gamma_(layout.Get(prefix + "gamma").offset),
      beta_(layout.Get(prefix + "beta").offset) {}

template <typename T>
const T* LayerNorm<T>::Forward(const T* params, const T* x, int rows) {
  x_ = x;
  rows_ = rows;
  const size_t n = static_cast<size_t>(rows) * d_;
  be_->LayerNormForward(rows, d_, static_cast<T>(kLayerNormEpsilon), x, params + gamma_, params + beta_,
                        y_.Reserve(be_, n), mean_.Reserve(be_, rows), rstd_.Reserve(be_, rows));
  return y_.data();
}

template <typename T>
void LayerNorm<T>::Backward(const T* params, const T* dy, T* dx, T* grad) {
  be_->LayerNormBackward(rows_, d_, dy, x_, params + gamma_, mean_.data(), rstd_.data(), dx, grad + gamma_,
                         grad + beta_);
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace psformer
