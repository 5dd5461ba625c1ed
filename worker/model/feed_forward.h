// Position-wise feed-forward sub-layer (docs/paper.md): FFN(x) = max(0, x W1 + b1) W2 + b2, with
// optional dropout after the ReLU (model.relu_dropout; 0 in the paper).
#ifndef PSFORMER_WORKER_MODEL_FEED_FORWARD_H_
#define PSFORMER_WORKER_MODEL_FEED_FORWARD_H_

#include <string>

#include "common/param_layout.h"
#include "worker/backend/backend.h"
#include "worker/model/dropout.h"

namespace psformer {

template <typename T>
class FeedForward {
 public:
  // prefix: e.g. "encoder.0.ffn." (w1, b1, w2, b2).
  FeedForward(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix, float relu_dropout,
              uint32_t relu_site);

  // x: (rows, d), valid until Backward. Returns (rows, d).
  const T* Forward(const T* params, const T* x, int rows, const DropoutKey* key);
  // dx (rows, d) overwritten; parameter gradients accumulate.
  void Backward(const T* params, const T* dout, T* dx, T* grad);

 private:
  Backend<T>* be_;
  int d_, f_;
  uint64_t w1_, b1_, w2_, b2_;
  Dropout<T> relu_dropout_;
  const T* x_ = nullptr;
  int rows_ = 0;
  DeviceBuffer<T> hidden_;          // (rows, f): ReLU output
  const T* used_hidden_ = nullptr;  // hidden_ after dropout
  DeviceBuffer<T> out_;             // (rows, d)
  DeviceBuffer<T> dhidden_;         // (rows, f)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_FEED_FORWARD_H_
