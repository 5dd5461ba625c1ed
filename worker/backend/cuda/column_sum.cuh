// Column sums in fixed chunks of rows, shared by the bias and layer-norm backward kernels:
// a kernel writes partial[chunk][c] for chunks of kColumnSumRows rows, then LaunchAddChunkSums
// adds the chunks to out[c] in chunk order. Deterministic, no atomics.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_COLUMN_SUM_CUH_
#define PSFORMER_WORKER_BACKEND_CUDA_COLUMN_SUM_CUH_

#include <cuda_runtime.h>

namespace psformer::cuda_kernels {

constexpr int kColumnSumRows = 64;
constexpr int kColumnSumThreads = 256;

int ColumnSumChunks(int rows);
// out (cols) += sum over k < chunks of partial (chunks, cols)[k].
void LaunchAddChunkSums(cudaStream_t stream, int chunks, int cols, const float* partial, float* out);

}  // namespace psformer::cuda_kernels

#endif  // PSFORMER_WORKER_BACKEND_CUDA_COLUMN_SUM_CUH_
