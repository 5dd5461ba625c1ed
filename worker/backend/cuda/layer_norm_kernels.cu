// Layer normalisation over the last dimension: forward and backward, one warp per row, with the
// CPU backend's two-pass mean and variance. The gain and bias gradients are column sums taken in
// fixed row chunks (column_sum.cuh), so they are deterministic without atomics.
#include "common/logging.h"
#include "worker/backend/cuda/column_sum.cuh"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"
#include "worker/backend/cuda/reduce.cuh"

namespace psformer::cuda_kernels {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

// ---- kernels ----

__global__ void LayerNormForwardKernel(int rows, int dim, float epsilon, const float* x, const float* gamma,
                                       const float* beta, float* y, float* mean, float* rstd) {
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;  // whole warps leave together
  const float* xr = x + static_cast<size_t>(r) * dim;
  float* yr = y + static_cast<size_t>(r) * dim;
  float sum = 0.0f;
  for (int i = lane; i < dim; i += kWarp) sum += xr[i];
  const float mu = WarpSum(sum) / dim;
  float sq = 0.0f;
  for (int i = lane; i < dim; i += kWarp) sq += (xr[i] - mu) * (xr[i] - mu);
  const float var = WarpSum(sq) / dim;
  const float rs = 1.0f / sqrtf(var + epsilon);
  for (int i = lane; i < dim; i += kWarp) yr[i] = gamma[i] * ((xr[i] - mu) * rs) + beta[i];
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
__global__ void LayerNormBackwardDxKernel(int rows, int dim, const float* dy, const float* x, const float* gamma,
                                          const float* mean, const float* rstd, float* dx) {
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const size_t o = static_cast<size_t>(r) * dim;
  const float mu = mean[r], rs = rstd[r];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int i = lane; i < dim; i += kWarp) {
    const float g = dy[o + i] * gamma[i];
    sum_g += g;
    sum_gx += g * (x[o + i] - mu) * rs;
  }
  sum_g = WarpSum(sum_g) / dim;
  sum_gx = WarpSum(sum_gx) / dim;
  for (int i = lane; i < dim; i += kWarp) {
    const float xhat = (x[o + i] - mu) * rs;
    dx[o + i] = rs * (dy[o + i] * gamma[i] - sum_g - xhat * sum_gx);
  }
}

// Per chunk of rows: partial_gamma[chunk][c] = sum dy * xhat, partial_beta[chunk][c] = sum dy.
__global__ void LayerNormParamChunkKernel(int rows, int dim, const float* dy, const float* x, const float* mean,
                                          const float* rstd, float* partial_gamma, float* partial_beta) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  const int begin = blockIdx.y * kColumnSumRows;
  const int end = min(rows, begin + kColumnSumRows);
  float dg = 0.0f, db = 0.0f;
  for (int r = begin; r < end; ++r) {
    const size_t o = static_cast<size_t>(r) * dim + c;
    dg += dy[o] * ((x[o] - mean[r]) * rstd[r]);
    db += dy[o];
  }
  partial_gamma[static_cast<size_t>(blockIdx.y) * dim + c] = dg;
  partial_beta[static_cast<size_t>(blockIdx.y) * dim + c] = db;
}

}  // namespace

// ---- launchers ----

void LaunchLayerNormForward(cudaStream_t stream, int rows, int dim, float epsilon, const float* x, const float* gamma,
                            const float* beta, float* y, float* mean, float* rstd) {
  PSF_CHECK(rows >= 0 && dim > 0 && epsilon >= 0.0f);
  if (rows == 0) return;
  const int blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  LayerNormForwardKernel<<<blocks, kRowsPerBlock * kWarp, 0, stream>>>(rows, dim, epsilon, x, gamma, beta, y, mean,
                                                                       rstd);
  PSF_CUDA_CHECK_LAUNCH(LayerNormForwardKernel);
}

void LaunchLayerNormBackward(cudaStream_t stream, int rows, int dim, const float* dy, const float* x,
                             const float* gamma, const float* mean, const float* rstd, float* dx, float* dgamma,
                             float* dbeta, void* workspace) {
  PSF_CHECK(rows >= 0 && dim > 0);
  if (rows == 0) return;
  PSF_CHECK(workspace != nullptr);
  const int blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  LayerNormBackwardDxKernel<<<blocks, kRowsPerBlock * kWarp, 0, stream>>>(rows, dim, dy, x, gamma, mean, rstd, dx);
  PSF_CUDA_CHECK_LAUNCH(LayerNormBackwardDxKernel);

  const int chunks = ColumnSumChunks(rows);
  float* partial_gamma = static_cast<float*>(workspace);                    // (chunks, dim)
  float* partial_beta = partial_gamma + static_cast<size_t>(chunks) * dim;  // (chunks, dim)
  const dim3 grid((dim + kColumnSumThreads - 1) / kColumnSumThreads, chunks);
  LayerNormParamChunkKernel<<<grid, kColumnSumThreads, 0, stream>>>(rows, dim, dy, x, mean, rstd, partial_gamma,
                                                                    partial_beta);
  PSF_CUDA_CHECK_LAUNCH(LayerNormParamChunkKernel);
  LaunchAddChunkSums(stream, chunks, dim, partial_gamma, dgamma);
  LaunchAddChunkSums(stream, chunks, dim, partial_beta, dbeta);
}

}  // namespace psformer::cuda_kernels
