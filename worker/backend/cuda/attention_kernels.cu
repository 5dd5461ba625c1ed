// Attention's masked, scaled softmax over keys and its backward, one warp per (batch, head,
// query) row. Masking follows the CPU backend: a key whose token is pad, or (causal) a key after
// the query, gets probability 0; a row with every key masked is all zero.
#include <math_constants.h>

#include "common/logging.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"
#include "worker/backend/cuda/reduce.cuh"

namespace psformer::cuda_kernels {
namespace {

constexpr int kRowsPerBlock = 8;

// ---- kernels ----

__global__ void MaskedSoftmaxKernel(int64_t rows, int heads, int queries, int keys, float scale, const float* scores,
                                    const int32_t* key_tokens, int32_t pad_id, bool causal, float* probs) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const int64_t b = r / (static_cast<int64_t>(heads) * queries);
  const int q = static_cast<int>(r % queries);
  const int32_t* tokens = key_tokens + b * keys;
  const float* in = scores + r * keys;
  float* out = probs + r * keys;
  const int limit = causal ? min(keys, q + 1) : keys;
  float max_value = -CUDART_INF_F;
  for (int j = lane; j < limit; j += kWarp) {
    if (tokens[j] != pad_id) max_value = fmaxf(max_value, scale * in[j]);
  }
  max_value = WarpMax(max_value);
  if (max_value == -CUDART_INF_F) {
    for (int j = lane; j < keys; j += kWarp) out[j] = 0.0f;
    return;
  }
  float total = 0.0f;
  for (int j = lane; j < keys; j += kWarp) {
    const float e = (j < limit && tokens[j] != pad_id) ? expf(scale * in[j] - max_value) : 0.0f;
    out[j] = e;
    total += e;
  }
  const float inv = 1.0f / WarpSum(total);
  for (int j = lane; j < keys; j += kWarp) out[j] *= inv;
}

// dscores = scale * p * (dp - sum_j p_j dp_j).
__global__ void SoftmaxBackwardKernel(int64_t rows, int keys, float scale, const float* probs, const float* dprobs,
                                      float* dscores) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* p = probs + r * keys;
  const float* dp = dprobs + r * keys;
  float* ds = dscores + r * keys;
  float dot = 0.0f;
  for (int j = lane; j < keys; j += kWarp) dot += p[j] * dp[j];
  dot = WarpSum(dot);
  for (int j = lane; j < keys; j += kWarp) ds[j] = scale * p[j] * (dp[j] - dot);
}

int64_t Rows(const AttentionShape& s) { return static_cast<int64_t>(s.batch) * s.heads * s.queries; }

void CheckShape(const AttentionShape& s) { PSF_CHECK(s.batch >= 0 && s.heads > 0 && s.queries >= 0 && s.keys >= 0); }

}  // namespace

// ---- launchers ----

void LaunchMaskedSoftmaxForward(cudaStream_t stream, const AttentionShape& shape, float scale, const float* scores,
                                const int32_t* key_tokens, int32_t pad_id, bool causal, float* probs) {
  CheckShape(shape);
  const int64_t rows = Rows(shape);
  if (rows == 0 || shape.keys == 0) return;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  PSF_CHECK(blocks < (int64_t{1} << 31));
  MaskedSoftmaxKernel<<<static_cast<unsigned>(blocks), kRowsPerBlock * kWarp, 0, stream>>>(
      rows, shape.heads, shape.queries, shape.keys, scale, scores, key_tokens, pad_id, causal, probs);
  PSF_CUDA_CHECK_LAUNCH(MaskedSoftmaxKernel);
}

void LaunchSoftmaxBackward(cudaStream_t stream, const AttentionShape& shape, float scale, const float* probs,
                           const float* dprobs, float* dscores) {
  CheckShape(shape);
  const int64_t rows = Rows(shape);
  if (rows == 0 || shape.keys == 0) return;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  PSF_CHECK(blocks < (int64_t{1} << 31));
  SoftmaxBackwardKernel<<<static_cast<unsigned>(blocks), kRowsPerBlock * kWarp, 0, stream>>>(rows, shape.keys, scale,
                                                                                             probs, dprobs, dscores);
  PSF_CUDA_CHECK_LAUNCH(SoftmaxBackwardKernel);
}

}  // namespace psformer::cuda_kernels
