// CRC-32C of whole kCrcBlockBytes blocks of device memory, for a copy to the host to carry its
// checksums with it (common/block_crcs.h): one warp a block, in the decomposition
// Crc32cBlockByLanes (common/crc32c.h) runs on the host, its reference twin. Each lane takes the
// CRC register from 0 over 128 consecutive bytes by four-byte slices (tables in shared memory);
// the 32 results are joined in five rounds of neighbours, the left moved on by the register's
// map for the right one's length; the constants come from the host.
#include "common/crc32c.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"

namespace psformer::cuda_kernels {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial
constexpr int kWarps = 8;                // blocks of the array a thread block takes at a time
constexpr int kWords = 1024;             // 4-byte words a block
static_assert(kCrcBlockBytes == 4 * kWords);

struct LaneConstants {
  uint32_t shift[5][32];
  uint32_t finish;
};

__device__ uint32_t ApplyGf2(const uint32_t* columns, uint32_t v) {
  uint32_t out = 0;
  for (int i = 0; i < 32; ++i) out ^= (0u - ((v >> i) & 1u)) & columns[i];
  return out;
}

// out[b] = {Crc32c(0, block b of data), stamp} for b < blocks.
__global__ void BlockCrcKernel(const uint32_t* data, size_t blocks, uint32_t stamp, LaneConstants k,
                               BlockCrcs::Entry* out) {
  __shared__ uint32_t table[4][256];
  // Each warp's block, lane l's 32 words at [l * 33, l * 33 + 32): loads and the lanes' reads
  // both fall on 32 distinct banks.
  __shared__ uint32_t words[kWarps][32 * 33];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    table[0][i] = c;
  }
  __syncthreads();
  for (int t = 1; t < 4; ++t) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
      table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
    __syncthreads();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t* w = words[warp];
  for (size_t b = static_cast<size_t>(blockIdx.x) * kWarps + warp; b < blocks;
       b += static_cast<size_t>(gridDim.x) * kWarps) {
    const uint32_t* src = data + b * kWords;
    for (int it = 0; it < 32; ++it) w[it * 33 + lane] = src[it * 32 + lane];  // word it*32+lane is lane it's
    __syncwarp();
    uint32_t c = 0;
    for (int j = 0; j < 32; ++j) {
      c ^= w[lane * 33 + j];
      c = table[3][c & 0xFF] ^ table[2][(c >> 8) & 0xFF] ^ table[1][(c >> 16) & 0xFF] ^ table[0][c >> 24];
    }
    __syncwarp();  // every lane has read its words before the next block's are stored
    for (int s = 0; s < 5; ++s) {
      const uint32_t right = __shfl_down_sync(0xFFFFFFFFu, c, 1 << s);
      if ((lane & ((2 << s) - 1)) == 0) c = ApplyGf2(k.shift[s], c) ^ right;
    }
    if (lane == 0) out[b] = BlockCrcs::Entry{c ^ k.finish, stamp};
  }
}

}  // namespace

cudaError_t TryLaunchBlockCrc32c(cudaStream_t stream, const void* data, size_t blocks, uint32_t stamp,
                                 BlockCrcs::Entry* out) {
  if (blocks == 0) return cudaSuccess;
  PSF_CHECK(reinterpret_cast<uintptr_t>(data) % 4 == 0);
  const Crc32cLaneConstants& host = Crc32cBlockLaneConstants();
  LaneConstants k;
  for (int s = 0; s < 5; ++s) {
    for (int i = 0; i < 32; ++i) k.shift[s][i] = host.shift[s][i];
  }
  k.finish = host.finish;
  const size_t grid = (blocks + kWarps - 1) / kWarps;
  BlockCrcKernel<<<static_cast<unsigned>(grid < 4096 ? grid : 4096), 32 * kWarps, 0, stream>>>(
      static_cast<const uint32_t*>(data), blocks, stamp, k, out);
  return cudaPeekAtLastError();  // not Get: an earlier error still pending is not this launch's to clear
}

void LaunchBlockCrc32c(cudaStream_t stream, const void* data, size_t blocks, uint32_t stamp, BlockCrcs::Entry* out) {
  PSF_CUDA_CHECK(TryLaunchBlockCrc32c(stream, data, blocks, stamp, out));
}

}  // namespace psformer::cuda_kernels
