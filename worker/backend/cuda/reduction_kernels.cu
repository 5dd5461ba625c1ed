// Deterministic reductions: column sums of a (rows, cols) matrix (the bias gradient) and the
// sum of a vector in double. Both split the work into a fixed number of pieces whose partial
// sums are combined in index order, so the bits never depend on scheduling and no atomics are
// needed.
#include <algorithm>

#include "common/logging.h"
#include "worker/backend/cuda/column_sum.cuh"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"
#include "worker/backend/cuda/reduce.cuh"

namespace psformer::cuda_kernels {
namespace {

constexpr int kSumBlocks = 256;
constexpr int kSumThreads = 256;

// ---- kernels ----

// partial[chunk][c] = sum of dy[r][c] over the rows of `chunk`, in row order.
__global__ void ColumnChunkSumKernel(int rows, int cols, const float* dy, float* partial) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int begin = blockIdx.y * kColumnSumRows;
  const int end = min(rows, begin + kColumnSumRows);
  float acc = 0.0f;
  for (int r = begin; r < end; ++r) acc += dy[static_cast<size_t>(r) * cols + c];
  partial[static_cast<size_t>(blockIdx.y) * cols + c] = acc;
}

// partial[b] = this block's sum of its grid-stride share of x, in double.
__global__ void SumPartialKernel(size_t n, const float* x, double* partial) {
  __shared__ double scratch[kWarp];
  double acc = 0.0;
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) acc += static_cast<double>(x[i]);
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void SumFinalKernel(int count, const double* partial, double* result) {
  __shared__ double scratch[kWarp];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) *result = acc;
}

__global__ void AddChunkSumsKernel(int chunks, int cols, const float* partial, float* out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int k = 0; k < chunks; ++k) acc += partial[static_cast<size_t>(k) * cols + c];
  out[c] += acc;
}

}  // namespace

int ColumnSumChunks(int rows) { return (rows + kColumnSumRows - 1) / kColumnSumRows; }

size_t ColumnSumWorkspaceBytes(int rows, int cols) {
  return static_cast<size_t>(std::max(1, ColumnSumChunks(rows))) * std::max(1, cols) * sizeof(float);
}

void LaunchAddChunkSums(cudaStream_t stream, int chunks, int cols, const float* partial, float* out) {
  AddChunkSumsKernel<<<(cols + kColumnSumThreads - 1) / kColumnSumThreads, kColumnSumThreads, 0, stream>>>(
      chunks, cols, partial, out);
  PSF_CUDA_CHECK_LAUNCH(AddChunkSumsKernel);
}

void LaunchBiasBackward(cudaStream_t stream, int rows, int cols, const float* dy, float* dbias, void* workspace) {
  PSF_CHECK(rows >= 0 && cols >= 0);
  if (rows == 0 || cols == 0) return;
  PSF_CHECK(workspace != nullptr);
  float* partial = static_cast<float*>(workspace);  // (chunks, cols)
  const int chunks = ColumnSumChunks(rows);
  const dim3 grid((cols + kColumnSumThreads - 1) / kColumnSumThreads, chunks);
  ColumnChunkSumKernel<<<grid, kColumnSumThreads, 0, stream>>>(rows, cols, dy, partial);
  PSF_CUDA_CHECK_LAUNCH(ColumnChunkSumKernel);
  LaunchAddChunkSums(stream, chunks, cols, partial, dbias);
}

size_t SumWorkspaceBytes() { return kSumBlocks * sizeof(double); }

void LaunchSum(cudaStream_t stream, size_t n, const float* x, double* result, void* workspace) {
  PSF_CHECK(result != nullptr && workspace != nullptr);
  double* partial = static_cast<double*>(workspace);  // (kSumBlocks)
  // A fixed grid, whatever n: the partition of x into partials, hence the bits, depend on n only.
  SumPartialKernel<<<kSumBlocks, kSumThreads, 0, stream>>>(n, x, partial);
  PSF_CUDA_CHECK_LAUNCH(SumPartialKernel);
  SumFinalKernel<<<1, kSumThreads, 0, stream>>>(kSumBlocks, partial, result);
  PSF_CUDA_CHECK_LAUNCH(SumFinalKernel);
}

}  // namespace psformer::cuda_kernels
