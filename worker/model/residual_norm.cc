#include "worker/model/residual_norm.h"

namespace psformer {

template <typename T>
ResidualNorm<T>::ResidualNorm(Backend<T>* backend, const ParamLayout& layout, const std::string& norm_prefix,
                              bool pre_ln, float dropout, uint32_t site)
    : be_(backend),
      pre_ln_(pre_ln),
      d_(static_cast<int>(layout.Get(norm_prefix + "gamma").cols)),
      norm_(backend, layout, norm_prefix),
      dropout_(backend, dropout, site) {}

template <typename T>
const T* ResidualNorm<T>::SublayerInput(const T* params, const T* x, int rows) {
  x_ = x;
  rows_ = rows;
  return pre_ln_ ? norm_.Forward(params, x, rows) : x;
}

template <typename T>
const T* ResidualNorm<T>::Output(const T* params, const T* sublayer_out, const DropoutKey* key) {
  const size_t n = static_cast<size_t>(rows_) * d_;
  const T* dropped = dropout_.Forward(sublayer_out, n, key);
  T* sum = sum_.Reserve(be_, n);
  be_->Add(n, x_, dropped, sum);
  return pre_ln_ ? sum : norm_.Forward(params, sum, rows_);
}

template <typename T>
const T* ResidualNorm<T>::OutputBackward(const T* params, const T* dy, T* grad) {
  if (pre_ln_) {
    dy_ = dy;
    return dropout_.Backward(dy);
  }
  T* dsum = dsum_.Reserve(be_, static_cast<size_t>(rows_) * d_);
  norm_.Backward(params, dy, dsum, grad);
  dy_ = dsum;
  return dropout_.Backward(dsum);
}

template <typename T>
const T* ResidualNorm<T>::InputBackward(const T* params, const T* d_sublayer_input, T* grad) {
  const size_t n = static_cast<size_t>(rows_) * d_;
  T* dx = dx_.Reserve(be_, n);
  if (pre_ln_) {
    norm_.Backward(params, d_sublayer_input, dx, grad);
    be_->Accumulate(n, dy_, dx);
  } else {
    be_->Add(n, dy_, d_sublayer_input, dx);
  }
  return dx;
}

template class ResidualNorm<float>;
template class ResidualNorm<double>;

}  // namespace psformer
