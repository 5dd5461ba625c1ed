// Elementwise kernels of the CUDA backend: fill, copy, add, multiply, bf16 rounding and widening, ReLU, bias add,
// dropout
// (Philox masks identical to the CPU backend's) and the head split/merge copies of attention.
// Every thread owns fixed elements, so results never depend on scheduling.
#include <algorithm>

#include "common/bfloat16.h"
#include "common/logging.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"
#include "worker/backend/cuda/reduce.cuh"

namespace psformer::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest

unsigned Blocks(size_t n) {
  return static_cast<unsigned>(std::max<size_t>(1, std::min(kMaxBlocks, (n + kThreads - 1) / kThreads)));
}

// ---- kernels ----

__global__ void FillKernel(size_t n, float value, float* x) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) x[i] = value;
}
__global__ void CopyKernel(size_t n, const float* x, float* y) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) y[i] = x[i];
}
__global__ void AddKernel(size_t n, const float* x, const float* y, float* z) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) z[i] = x[i] + y[i];
}
__global__ void AccumulateKernel(size_t n, const float* x, float* y) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) y[i] += x[i];
}
__global__ void MultiplyKernel(size_t n, const float* x, const float* y, float* z) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) z[i] = x[i] * y[i];
}
// The wire's rounding (common/bfloat16.h), the same function the host uses: the same bits.
__global__ void RoundToBf16Kernel(size_t n, const float* x, uint16_t* out) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) out[i] = Bf16OfFloatBits(__float_as_uint(x[i]));
}
__global__ void WidenBf16Kernel(size_t n, const uint16_t* x, float* out) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads())
    out[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}
__global__ void ReluForwardKernel(size_t n, const float* x, float* y) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void ReluBackwardKernel(size_t n, const float* y, const float* dy, float* dx) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
// x (rows, cols) += bias (cols). Rows along grid y, columns along x: no 64-bit division per
// element (it made this kernel and the head copies below twice as slow as a plain add).
__global__ void BiasAddKernel(int rows, int cols, const float* bias, float* x) {
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
      x[static_cast<size_t>(r) * cols + c] += bias[c];
    }
  }
}

// One thread per group of four elements: one Philox call gives their four words, as the CPU
// backend and DropoutKeep (common/philox.h) define. keep_scale is computed once on the host in
// the CPU backend's arithmetic, so kept elements get the identical factor.
__global__ void DropoutKernel(size_t n, float p, float keep_scale, PhiloxKey pkey, uint32_t tensor, uint32_t step,
                              uint32_t worker, const float* x, float* y, float* mask) {
  const size_t groups = (n + 3) / 4;
  for (size_t g = GlobalThread(); g < groups; g += GridThreads()) {
    const PhiloxCounter words = Philox4x32_10(PhiloxCounter{{static_cast<uint32_t>(g), tensor, step, worker}}, pkey);
    const size_t first = g * 4;
    const size_t last = min(n, first + 4);
    for (size_t i = first; i < last; ++i) {
      const float m = PhiloxUniform(words.v[i - first]) >= p ? keep_scale : 0.0f;
      const float xi = x[i];  // read before writing: x and y may alias
      mask[i] = m;
      y[i] = xi * m;
    }
  }
}

// out (batch, heads, len, head_dim) <- columns [column, column + heads*head_dim) of x, whose
// batch*len rows are ld apart. A grid row per row of x; reads are contiguous, writes contiguous
// per head.
__global__ void SplitHeadsKernel(int rows, const float* x, int ld, int column, int len, int heads, int head_dim,
                                 float* out) {
  const int width = heads * head_dim;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const int b = r / len, t = r % len;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < width; j += gridDim.x * blockDim.x) {
      const int h = j / head_dim, d = j % head_dim;
      out[((static_cast<size_t>(b) * heads + h) * len + t) * head_dim + d] =
          x[static_cast<size_t>(r) * ld + column + j];
    }
  }
}

__global__ void MergeHeadsKernel(int rows, const float* x, int len, int heads, int head_dim, float* out, int ld,
                                 int column) {
  const int width = heads * head_dim;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const int b = r / len, t = r % len;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < width; j += gridDim.x * blockDim.x) {
      const int h = j / head_dim, d = j % head_dim;
      out[static_cast<size_t>(r) * ld + column + j] =
          x[((static_cast<size_t>(b) * heads + h) * len + t) * head_dim + d];
    }
  }
}

// Grid for a (rows, cols) kernel of the shape above.
dim3 RowGrid(int rows, int cols) {
  return dim3(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(std::min(rows, 65535)));
}

}  // namespace

// ---- launchers ----

#define PSF_ELEMENTWISE_LAUNCH(kernel, n, ...)                    \
  do {                                                            \
    if ((n) == 0) return;                                         \
    kernel<<<Blocks(n), kThreads, 0, stream>>>((n), __VA_ARGS__); \
    PSF_CUDA_CHECK_LAUNCH(kernel);                                \
  } while (0)

void LaunchFill(cudaStream_t stream, size_t n, float value, float* x) {
  PSF_ELEMENTWISE_LAUNCH(FillKernel, n, value, x);
}
void LaunchCopy(cudaStream_t stream, size_t n, const float* x, float* y) {
  if (x == y) return;
  PSF_ELEMENTWISE_LAUNCH(CopyKernel, n, x, y);
}
void LaunchAdd(cudaStream_t stream, size_t n, const float* x, const float* y, float* z) {
  PSF_ELEMENTWISE_LAUNCH(AddKernel, n, x, y, z);
}
void LaunchAccumulate(cudaStream_t stream, size_t n, const float* x, float* y) {
  PSF_ELEMENTWISE_LAUNCH(AccumulateKernel, n, x, y);
}
void LaunchMultiply(cudaStream_t stream, size_t n, const float* x, const float* y, float* z) {
  PSF_ELEMENTWISE_LAUNCH(MultiplyKernel, n, x, y, z);
}
void LaunchRoundToBf16(cudaStream_t stream, size_t n, const float* x, uint16_t* out) {
  PSF_ELEMENTWISE_LAUNCH(RoundToBf16Kernel, n, x, out);
}
void LaunchWidenBf16(cudaStream_t stream, size_t n, const uint16_t* x, float* out) {
  PSF_ELEMENTWISE_LAUNCH(WidenBf16Kernel, n, x, out);
}
void LaunchReluForward(cudaStream_t stream, size_t n, const float* x, float* y) {
  PSF_ELEMENTWISE_LAUNCH(ReluForwardKernel, n, x, y);
}
void LaunchReluBackward(cudaStream_t stream, size_t n, const float* y, const float* dy, float* dx) {
  PSF_ELEMENTWISE_LAUNCH(ReluBackwardKernel, n, y, dy, dx);
}

void LaunchBiasAdd(cudaStream_t stream, int rows, int cols, const float* bias, float* x) {
  PSF_CHECK(rows >= 0 && cols >= 0);
  if (rows == 0 || cols == 0) return;
  BiasAddKernel<<<RowGrid(rows, cols), kThreads, 0, stream>>>(rows, cols, bias, x);
  PSF_CUDA_CHECK_LAUNCH(BiasAddKernel);
}

void LaunchDropoutForward(cudaStream_t stream, size_t n, float p, const DropoutKey& key, uint32_t tensor,
                          const float* x, float* y, float* mask) {
  PSF_CHECK(p >= 0.0f && p < 1.0f);
  if (n == 0) return;
  if (p <= 0.0f) {
    LaunchFill(stream, n, 1.0f, mask);
    LaunchCopy(stream, n, x, y);
    return;
  }
  const float keep_scale = 1.0f / (1.0f - p);
  const PhiloxKey pkey{{static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32)}};
  const size_t groups = (n + 3) / 4;
  DropoutKernel<<<Blocks(groups), kThreads, 0, stream>>>(n, p, keep_scale, pkey, tensor, key.step, key.worker, x, y,
                                                         mask);
  PSF_CUDA_CHECK_LAUNCH(DropoutKernel);
}

void LaunchSplitHeads(cudaStream_t stream, const float* x, int ld, int column, int batch, int len, int heads,
                      int head_dim, float* out) {
  PSF_CHECK(batch >= 0 && len >= 0 && heads > 0 && head_dim > 0 && column >= 0);
  PSF_CHECK(ld >= column + heads * head_dim);
  const int rows = batch * len;
  if (rows == 0) return;
  SplitHeadsKernel<<<RowGrid(rows, heads * head_dim), kThreads, 0, stream>>>(rows, x, ld, column, len, heads, head_dim,
                                                                             out);
  PSF_CUDA_CHECK_LAUNCH(SplitHeadsKernel);
}

void LaunchMergeHeads(cudaStream_t stream, const float* x, int batch, int len, int heads, int head_dim, float* out,
                      int ld, int column) {
  PSF_CHECK(batch >= 0 && len >= 0 && heads > 0 && head_dim > 0 && column >= 0);
  PSF_CHECK(ld >= column + heads * head_dim);
  const int rows = batch * len;
  if (rows == 0) return;
  MergeHeadsKernel<<<RowGrid(rows, heads * head_dim), kThreads, 0, stream>>>(rows, x, len, heads, head_dim, out, ld,
                                                                             column);
  PSF_CUDA_CHECK_LAUNCH(MergeHeadsKernel);
}

#undef PSF_ELEMENTWISE_LAUNCH

}  // namespace psformer::cuda_kernels
