// Affine maps y = x W + b with W stored (in, out) row-major (common/param_layout.h), and their
// backward. Small inline helpers over the backend shared by the attention and FFN layers.
#ifndef PSFORMER_WORKER_MODEL_LINEAR_H_
#define PSFORMER_WORKER_MODEL_LINEAR_H_

#include "worker/backend/backend.h"

namespace psformer {

// y (rows, out) = x (rows, in) W (in, out) + b (out).
template <typename T>
void LinearForward(Backend<T>* be, int rows, int in, int out, const T* x, const T* w, const T* b, T* y) {
  be->GemmBias(rows, out, in, x, w, b, /*relu=*/false, y);
}

// dw (in, out) += x^T dy; db (out) += column sums of dy; dx (rows, in) = dy W^T, added to what
// is there when accumulate_dx, skipped when dx is null.
template <typename T>
void LinearBackward(Backend<T>* be, int rows, int in, int out, const T* x, const T* w, const T* dy, T* dx,
                    bool accumulate_dx, T* dw, T* db) {
  be->Gemm(Transpose::kYes, Transpose::kNo, in, out, rows, T(1), x, in, dy, out, T(1), dw, out);
  be->BiasBackward(rows, out, dy, db);
  if (dx != nullptr) {
    be->Gemm(Transpose::kNo, Transpose::kYes, rows, in, out, T(1), dy, out, w, out, accumulate_dx ? T(1) : T(0), dx,
             in);
  }
}

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_LINEAR_H_
