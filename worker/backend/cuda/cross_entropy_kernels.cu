// Fused log-softmax + label-smoothed cross entropy over the vocabulary, one block per row:
// one read of the row gathers the maximum, the sum of exponentials (online, rescaled as the
// maximum grows), the argmax (first maximum wins) and the plain sum of logits; a second pass
// writes the gradient. Rows are independent, so the logits matrix may be as large as memory allows
// (25k rows x 37k vocab is 3.7 GB in fp32) with no extra workspace. Same formulas as the CPU
// backend: loss = (1-eps) (log_z - x_t) + eps (log_z - mean(x)), dlogits = p - ((1-eps) onehot +
// eps/V), zero on pad rows.
#include <math_constants.h>

#include "common/logging.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"
#include "worker/backend/cuda/reduce.cuh"

namespace psformer::cuda_kernels {
namespace {

constexpr int kThreads = 512;

struct RowState {
  float max;       // running maximum
  float sum_exp;   // sum of exp(x - max)
  float best;      // the largest logit seen ...
  int best_index;  // ... and its first index
  float sum_x;     // sum of logits
};

__device__ inline void Combine(RowState& a, const RowState& b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -CUDART_INF_F) {
    a.sum_exp = 0.0f;
  } else {
    a.sum_exp = a.sum_exp * expf(a.max - m) + b.sum_exp * expf(b.max - m);
  }
  a.max = m;
  if (b.best > a.best || (b.best == a.best && b.best_index < a.best_index)) {
    a.best = b.best;
    a.best_index = b.best_index;
  }
  a.sum_x += b.sum_x;
}

__device__ inline RowState ShuffleXor(const RowState& s, int offset) {
  return RowState{__shfl_xor_sync(kFullMask, s.max, offset), __shfl_xor_sync(kFullMask, s.sum_exp, offset),
                  __shfl_xor_sync(kFullMask, s.best, offset), __shfl_xor_sync(kFullMask, s.best_index, offset),
                  __shfl_xor_sync(kFullMask, s.sum_x, offset)};
}

// ---- kernels ----

__global__ void CrossEntropyKernel(int vocab, float epsilon, const float* logits, const int32_t* targets,
                                   int32_t pad_id, float* loss, float* correct, float* dlogits) {
  __shared__ RowState warp_states[kThreads / kWarp];
  __shared__ RowState row_state;
  const int r = blockIdx.x;
  const float* x = logits + static_cast<size_t>(r) * vocab;
  float* dx = dlogits != nullptr ? dlogits + static_cast<size_t>(r) * vocab : nullptr;
  const int32_t target = targets[r];
  if (target == pad_id) {
    if (threadIdx.x == 0) {
      loss[r] = 0.0f;
      correct[r] = 0.0f;
    }
    if (dx != nullptr) {
      for (int v = threadIdx.x; v < vocab; v += blockDim.x) dx[v] = 0.0f;
    }
    return;
  }
  // Read before the gradient pass may overwrite it (dlogits may alias logits); the reductions
  // below synchronise the block in between.
  const float target_x = x[target];

  RowState s{-CUDART_INF_F, 0.0f, -CUDART_INF_F, vocab, 0.0f};
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float xv = x[v];
    if (xv > s.max) {
      s.sum_exp = s.sum_exp * expf(s.max - xv) + 1.0f;
      s.max = xv;
    } else {
      s.sum_exp += expf(xv - s.max);
    }
    if (xv > s.best) {  // strictly greater: the first maximum of this thread's elements stays
      s.best = xv;
      s.best_index = v;
    }
    s.sum_x += xv;
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) Combine(s, ShuffleXor(s, offset));
  if (threadIdx.x % kWarp == 0) warp_states[threadIdx.x / kWarp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    RowState total = warp_states[0];
    for (int w = 1; w < static_cast<int>(blockDim.x) / kWarp; ++w) Combine(total, warp_states[w]);
    row_state = total;
  }
  __syncthreads();
  const RowState total = row_state;
  const float log_z = total.max + logf(total.sum_exp);
  if (threadIdx.x == 0) {
    const int best = total.best_index < vocab ? total.best_index : 0;
    loss[r] = (1.0f - epsilon) * (log_z - target_x) + epsilon * (log_z - total.sum_x / vocab);
    correct[r] = best == target ? 1.0f : 0.0f;
  }
  if (dx == nullptr) return;
  const float smooth = epsilon / vocab;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    float d = expf(x[v] - log_z) - smooth;
    if (v == target) d = d - (1.0f - epsilon);
    dx[v] = d;
  }
}

}  // namespace

// ---- launchers ----

void LaunchCrossEntropy(cudaStream_t stream, int rows, int vocab, float epsilon, const float* logits,
                        const int32_t* targets, int32_t pad_id, float* loss, float* correct, float* dlogits) {
  PSF_CHECK(rows >= 0 && vocab > 0 && epsilon >= 0.0f && epsilon < 1.0f);
  if (rows == 0) return;
  CrossEntropyKernel<<<rows, kThreads, 0, stream>>>(vocab, epsilon, logits, targets, pad_id, loss, correct, dlogits);
  PSF_CUDA_CHECK_LAUNCH(CrossEntropyKernel);
}

}  // namespace psformer::cuda_kernels
