// An affine layer's forward, y = x W + b (then ReLU for the feed-forward layer's first half), as
// one cuBLASLt matrix product with the bias (and ReLU) in its epilogue: the result is written
// once, instead of written by the product and then read and written again by a bias kernel and a
// ReLU kernel. Plans (descriptors and the algorithm cuBLASLt's heuristic picks) are made once per
// shape, math mode and pointer alignment and reused, so a training step only launches.
// Included only by CUDA translation units.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_LT_AFFINE_H_
#define PSFORMER_WORKER_BACKEND_CUDA_LT_AFFINE_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "common/status.h"
#include "worker/backend/cuda/cuda_backend.h"

namespace psformer {

// The cuBLAS compute type of a GemmMath (defined with the backend's cuBLAS calls).
cublasComputeType_t CublasComputeType(GemmMath math);

class LtAffine {
 public:
  static StatusOr<std::unique_ptr<LtAffine>> Create();
  ~LtAffine();
  LtAffine(const LtAffine&) = delete;
  LtAffine& operator=(const LtAffine&) = delete;

  // y (m, n) = x (m, k) w (k, n) + bias (n), row-major and packed; then max(y, 0) when relu.
  // Enqueued on `stream`. Returns false, having done nothing, where cuBLASLt offers no algorithm
  // for this case or bias is not 16-byte aligned (the caller then runs the unfused operations).
  bool Run(cudaStream_t stream, GemmMath math, int m, int n, int k, const float* x, const float* w, const float* bias,
           bool relu, float* y, void* workspace, size_t workspace_bytes);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool usable = false;
  };
  // m, n, k, relu, math, and the alignments (bytes, up to 16) of x, w and y; the bias is always
  // 16-byte aligned here (Run).
  using Key = std::tuple<int, int, int, bool, GemmMath, int, int, int>;

  explicit LtAffine(cublasLtHandle_t handle) : handle_(handle) {}
  Plan MakePlan(const Key& key, const float* bias, size_t workspace_bytes) const;
  static void Destroy(Plan* plan);

  cublasLtHandle_t handle_;
  std::map<Key, Plan> plans_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_LT_AFFINE_H_
