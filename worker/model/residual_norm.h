// The connection around every sub-layer (docs/paper.md):
//   post-LN (paper): y = LayerNorm(x + Dropout(Sublayer(x)))
//   pre-LN:          y = x + Dropout(Sublayer(LayerNorm(x)))
// Use: in = SublayerInput(x); out = Output(Sublayer(in)); and backward in the mirror order:
// dsub = OutputBackward(dy); din = Sublayer'(dsub); dx = InputBackward(din).
#ifndef PSFORMER_WORKER_MODEL_RESIDUAL_NORM_H_
#define PSFORMER_WORKER_MODEL_RESIDUAL_NORM_H_

#include <string>

#include "common/param_layout.h"
#include "worker/backend/backend.h"
#include "worker/model/dropout.h"
#include "worker/model/layer_norm.h"

namespace psformer {

template <typename T>
class ResidualNorm {
 public:
  // norm_prefix names the LayerNorm's parameters, e.g. "encoder.0.ln1.".
  ResidualNorm(Backend<T>* backend, const ParamLayout& layout, const std::string& norm_prefix, bool pre_ln,
               float dropout, uint32_t site);

  // x: (rows, d), valid until backward. Returns what the sub-layer reads.
  const T* SublayerInput(const T* params, const T* x, int rows);
  // Returns the connection's output y (rows, d), an internal buffer.
  const T* Output(const T* params, const T* sublayer_out, const DropoutKey* key);
  // dy: gradient w.r.t. y, valid until InputBackward. Returns the gradient w.r.t. the
  // sub-layer's output.
  const T* OutputBackward(const T* params, const T* dy, T* grad);
  // d_sublayer_input: gradient w.r.t. what SublayerInput returned. Returns dx (rows, d).
  const T* InputBackward(const T* params, const T* d_sublayer_input, T* grad);

 private:
  Backend<T>* be_;
  bool pre_ln_;
  int d_;
  LayerNorm<T> norm_;
  Dropout<T> dropout_;
  const T* x_ = nullptr;   // (rows, d)
  const T* dy_ = nullptr;  // (rows, d)
  int rows_ = 0;
  DeviceBuffer<T> sum_;   // (rows, d): post-LN x + dropout(sub); pre-LN the output
  DeviceBuffer<T> dsum_;  // (rows, d): post-LN gradient w.r.t. sum_
  DeviceBuffer<T> dx_;    // (rows, d)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_RESIDUAL_NORM_H_
