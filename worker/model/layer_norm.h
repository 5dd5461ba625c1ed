// Layer normalisation over d_model with learned gain and bias (epsilon 1e-5, PyTorch's default).
#ifndef PSFORMER_WORKER_MODEL_LAYER_NORM_H_
#define PSFORMER_WORKER_MODEL_LAYER_NORM_H_

#include <string>

#include "common/param_layout.h"
#include "worker/backend/backend.h"

namespace psformer {

constexpr double kLayerNormEpsilon = 1e-5;

template <typename T>
class LayerNorm {
 public:
  // prefix names the parameters, e.g. "encoder.0.ln1." (gamma, beta).
  LayerNorm(Backend<T>* backend, const ParamLayout& layout, const std::string& prefix);

  // y (rows, d) = LN(x); x must stay valid until Backward. Returns an internal buffer.
  const T* Forward(const T* params, const T* x, int rows);
  // dx (rows, d) = gradient w.r.t. x (overwritten); gamma and beta gradients accumulate in grad.
  void Backward(const T* params, const T* dy, T* dx, T* grad);
  const T* output() const { return y_.data(); }

 private:
  Backend<T>* be_;
  int d_;
  uint64_t gamma_, beta_;  // offsets in the flat vector
  const T* x_ = nullptr;   // (rows, d)
  int rows_ = 0;
  DeviceBuffer<T> y_;            // (rows, d)
  DeviceBuffer<T> mean_, rstd_;  // (rows)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_LAYER_NORM_H_
