// Embedding gather (scaled, plus positional encodings) and its deterministic scatter-add
// backward. Tokens repeat within a batch, so several rows of dout land on one table row. Rather
// than atomics (whose order, hence rounding, depends on timing), token positions are stably
// sorted by id, and one block adds each distinct id's rows in token order: the same additions,
// in the same order, as the CPU backend.
#include <cub/device/device_radix_sort.cuh>

#include "common/logging.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"
#include "worker/backend/cuda/reduce.cuh"

namespace psformer::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr size_t kAlign = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// ---- kernels ----

// out (n, dim) = scale * table[ids[i]] (+ pe[i % len]).
__global__ void EmbeddingForwardKernel(size_t total, int dim, const float* table, const int32_t* ids, float scale,
                                       int len, const float* pe, float* out) {
  for (size_t o = GlobalThread(); o < total; o += GridThreads()) {
    const size_t i = o / dim;
    const int c = static_cast<int>(o % dim);
    const float v = scale * table[static_cast<size_t>(ids[i]) * dim + c];
    out[o] = pe != nullptr ? v + pe[(i % len) * dim + c] : v;
  }
}

__global__ void IotaKernel(size_t n, uint32_t* positions) {
  for (size_t i = GlobalThread(); i < n; i += GridThreads()) positions[i] = static_cast<uint32_t>(i);
}

// Block k handles sorted entry k if it starts a run of equal ids: adds the run's rows of dout to
// the table row in token order (the sort is stable, so positions within a run ascend).
__global__ void EmbeddingRunSumKernel(size_t n, int dim, const float* dout, const int32_t* sorted_ids,
                                      const uint32_t* sorted_positions, float scale, float* dtable) {
  const size_t k = blockIdx.x;
  const int32_t id = sorted_ids[k];
  if (k > 0 && sorted_ids[k - 1] == id) return;
  size_t end = k + 1;
  while (end < n && sorted_ids[end] == id) ++end;
  float* row = dtable + static_cast<size_t>(id) * dim;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    float acc = row[c];
    for (size_t j = k; j < end; ++j) acc += scale * dout[static_cast<size_t>(sorted_positions[j]) * dim + c];
    row[c] = acc;
  }
}

size_t SortTempBytes(size_t n) {
  size_t bytes = 0;
  PSF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), static_cast<int>(n)));
  return bytes;
}

}  // namespace

// ---- launchers ----

void LaunchEmbeddingForward(cudaStream_t stream, size_t n, int dim, const float* table, const int32_t* ids, float scale,
                            int len, const float* pe, float* out) {
  PSF_CHECK(dim > 0 && len >= 0);
  PSF_CHECK((len > 0) == (pe != nullptr));
  const size_t total = n * dim;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>(1 << 16, (total + kThreads - 1) / kThreads));
  EmbeddingForwardKernel<<<blocks, kThreads, 0, stream>>>(total, dim, table, ids, scale, len, pe, out);
  PSF_CUDA_CHECK_LAUNCH(EmbeddingForwardKernel);
}

// Workspace layout: sorted ids (n), positions (n), sorted positions (n), CUB's temporary storage.
size_t EmbeddingBackwardWorkspaceBytes(size_t n) {
  return 2 * AlignUp(n * sizeof(int32_t)) + AlignUp(n * sizeof(uint32_t)) + AlignUp(SortTempBytes(n));
}

void LaunchEmbeddingBackward(cudaStream_t stream, size_t n, int dim, const float* dout, const int32_t* ids, float scale,
                             float* dtable, void* workspace, size_t workspace_bytes) {
  PSF_CHECK(dim > 0);
  if (n == 0) return;
  PSF_CHECK(n < (size_t{1} << 31) && "CUB sorts int-indexed ranges");
  PSF_CHECK(workspace != nullptr && workspace_bytes >= EmbeddingBackwardWorkspaceBytes(n));
  char* base = static_cast<char*>(workspace);
  int32_t* sorted_ids = reinterpret_cast<int32_t*>(base);                                             // (n)
  uint32_t* positions = reinterpret_cast<uint32_t*>(base + AlignUp(n * sizeof(int32_t)));             // (n)
  uint32_t* sorted_positions = reinterpret_cast<uint32_t*>(base + 2 * AlignUp(n * sizeof(int32_t)));  // (n)
  void* temp = base + 2 * AlignUp(n * sizeof(int32_t)) + AlignUp(n * sizeof(uint32_t));
  size_t temp_bytes = SortTempBytes(n);

  const unsigned blocks = static_cast<unsigned>(std::min<size_t>(1 << 16, (n + kThreads - 1) / kThreads));
  IotaKernel<<<blocks, kThreads, 0, stream>>>(n, positions);
  PSF_CUDA_CHECK_LAUNCH(IotaKernel);
  PSF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, sorted_ids, positions, sorted_positions,
                                                 static_cast<int>(n), 0, 32, stream));
  EmbeddingRunSumKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(n, dim, dout, sorted_ids, sorted_positions,
                                                                           scale, dtable);
  PSF_CUDA_CHECK_LAUNCH(EmbeddingRunSumKernel);
}

}  // namespace psformer::cuda_kernels
