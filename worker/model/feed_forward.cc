#include "worker/model/feed_forward.h"

#include "worker/model/linear.h"

namespace psformer {

template <typename T>
FeedForward<T>::FeedForward(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix,
                            float relu_dropout, uint32_t relu_site)
    : be_(backend),
      d_(static_cast<int>(layout.Get(prefix + "w1").rows)),
      f_(static_cast<int>(layout.Get(prefix + "w1").cols)),
      w1_(layout.Get(prefix + "w1").offset),
      b1_(layout.Get(prefix + "b1").offset),
      w2_(layout.Get(prefix + "w2").offset),
      b2_(layout.Get(prefix + "b2").offset),
      relu_dropout_(backend, relu_dropout, relu_site) {}

template <typename T>
const T* FeedForward<T>::Forward(const T* params, const T* x, int rows, const DropoutKey* key) {
  x_ = x;
  rows_ = rows;
  const size_t nh = static_cast<size_t>(rows) * f_;
  T* hidden = hidden_.Reserve(be_, nh);
  be_->GemmBias(rows, f_, d_, x, params + w1_, params + b1_, /*relu=*/true, hidden);
  used_hidden_ = relu_dropout_.Forward(hidden, nh, key);
  T* out = out_.Reserve(be_, static_cast<size_t>(rows) * d_);
  LinearForward(be_, rows, f_, d_, used_hidden_, params + w2_, params + b2_, out);
  return out;
}

template <typename T>
void FeedForward<T>::Backward(const T* params, const T* dout, T* dx, T* grad) {
  const size_t nh = static_cast<size_t>(rows_) * f_;
  T* dhidden = dhidden_.Reserve(be_, nh);
  LinearBackward(be_, rows_, f_, d_, used_hidden_, params + w2_, dout, dhidden, false, grad + w2_, grad + b2_);
  const T* dhidden_before_dropout = relu_dropout_.Backward(dhidden);
  // The ReLU's output decides where gradient passes; the result goes back into dhidden.
  be_->ReluBackward(nh, hidden_.data(), dhidden_before_dropout, dhidden);
  LinearBackward(be_, rows_, d_, f_, x_, params + w1_, dhidden, dx, false, grad + w1_, grad + b1_);
}

template class FeedForward<float>;
template class FeedForward<double>;

}  // namespace psformer
