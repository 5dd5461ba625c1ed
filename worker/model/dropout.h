// Dropout as a layer: y = x * mask with the mask of common/philox.h, and its backward
// dx = dy * mask. Inactive (the identity, no work) when p == 0 or no key is given (evaluation).
#ifndef PSFORMER_WORKER_MODEL_DROPOUT_H_
#define PSFORMER_WORKER_MODEL_DROPOUT_H_

#include "worker/backend/backend.h"

namespace psformer {

template <typename T>
class Dropout {
 public:
  Dropout(Backend<T>* backend, float p, uint32_t site) : be_(backend), p_(p), site_(site) {}

  // Returns y (n): x itself when inactive, else an internal buffer valid until the next Forward.
  // key == nullptr means evaluation.
  const T* Forward(const T* x, size_t n, const DropoutKey* key) {
    active_ = key != nullptr && p_ > 0.0f;
    if (!active_) return x;
    n_ = n;
    be_->DropoutForward(n, p_, *key, site_, x, y_.Reserve(be_, n), mask_.Reserve(be_, n));
    return y_.data();
  }
  // Returns dx (n): dy itself when inactive.
  const T* Backward(const T* dy) {
    if (!active_) return dy;
    be_->Multiply(n_, dy, mask_.data(), dx_.Reserve(be_, n_));
    return dx_.data();
  }

 private:
  Backend<T>* be_;
  float p_;
  uint32_t site_;
  bool active_ = false;
  size_t n_ = 0;
  DeviceBuffer<T> y_, mask_, dx_;  // (n)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_DROPOUT_H_
