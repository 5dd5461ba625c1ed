// Launchers of the CUDA backend's kernels (the *_kernels.cu files). Each launcher checks its
// shape preconditions (PSF_CHECK), enqueues on `stream` and checks the launch. Semantics are those
// of the same-named Backend<float> operation (worker/backend/backend.h) and match the CPU backend:
// the same masking rules, the same Philox masks bit for bit, deterministic reductions (fixed
// orders, no atomics). Workspaces are device memory provided by the caller, sized by the
// matching *WorkspaceBytes function.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_CUDA_KERNELS_H_
#define PSFORMER_WORKER_BACKEND_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/block_crcs.h"
#include "common/philox.h"
#include "worker/backend/backend.h"

namespace psformer::cuda_kernels {

// ---- elementwise_kernels.cu ----
void LaunchFill(cudaStream_t stream, size_t n, float value, float* x);
void LaunchCopy(cudaStream_t stream, size_t n, const float* x, float* y);
void LaunchAdd(cudaStream_t stream, size_t n, const float* x, const float* y, float* z);
void LaunchAccumulate(cudaStream_t stream, size_t n, const float* x, float* y);
void LaunchMultiply(cudaStream_t stream, size_t n, const float* x, const float* y, float* z);
// out[i] = the bf16 of x[i], rounded as common/bfloat16.h rounds.
void LaunchRoundToBf16(cudaStream_t stream, size_t n, const float* x, uint16_t* out);
// out[i] = x[i] widened from bf16 (exact).
void LaunchWidenBf16(cudaStream_t stream, size_t n, const uint16_t* x, float* out);

// ---- crc32c_kernels.cu ----
// out[b] = {Crc32c(0, data + b * kCrcBlockBytes, kCrcBlockBytes), stamp} for b < blocks (device
// memory both; data 4-byte aligned), as Crc32cBlockByLanes computes it on the host.
void LaunchBlockCrc32c(cudaStream_t stream, const void* data, size_t blocks, uint32_t stamp, BlockCrcs::Entry* out);
// The same, returning the launch's error (cleared) instead of aborting on it.
cudaError_t TryLaunchBlockCrc32c(cudaStream_t stream, const void* data, size_t blocks, uint32_t stamp,
                                 BlockCrcs::Entry* out);
void LaunchReluForward(cudaStream_t stream, size_t n, const float* x, float* y);
void LaunchReluBackward(cudaStream_t stream, size_t n, const float* y, const float* dy, float* dx);
void LaunchBiasAdd(cudaStream_t stream, int rows, int cols, const float* bias, float* x);
void LaunchDropoutForward(cudaStream_t stream, size_t n, float p, const DropoutKey& key, uint32_t tensor,
                          const float* x, float* y, float* mask);
void LaunchSplitHeads(cudaStream_t stream, const float* x, int ld, int column, int batch, int len, int heads,
                      int head_dim, float* out);
void LaunchMergeHeads(cudaStream_t stream, const float* x, int batch, int len, int heads, int head_dim, float* out,
                      int ld, int column);

// ---- reduction_kernels.cu ----
// Column sums in fixed row chunks, then the chunks in order.
size_t ColumnSumWorkspaceBytes(int rows, int cols);
void LaunchBiasBackward(cudaStream_t stream, int rows, int cols, const float* dy, float* dbias, void* workspace);
// The sum in double of n floats, left in *result (device memory).
size_t SumWorkspaceBytes();
void LaunchSum(cudaStream_t stream, size_t n, const float* x, double* result, void* workspace);

// ---- layer_norm_kernels.cu ----
void LaunchLayerNormForward(cudaStream_t stream, int rows, int dim, float epsilon, const float* x, const float* gamma,
                            const float* beta, float* y, float* mean, float* rstd);
// Workspace: 2 * ColumnSumWorkspaceBytes(rows, dim).
void LaunchLayerNormBackward(cudaStream_t stream, int rows, int dim, const float* dy, const float* x,
                             const float* gamma, const float* mean, const float* rstd, float* dx, float* dgamma,
                             float* dbeta, void* workspace);

// ---- attention_kernels.cu ----
void LaunchMaskedSoftmaxForward(cudaStream_t stream, const AttentionShape& shape, float scale, const float* scores,
                                const int32_t* key_tokens, int32_t pad_id, bool causal, float* probs);
void LaunchSoftmaxBackward(cudaStream_t stream, const AttentionShape& shape, float scale, const float* probs,
                           const float* dprobs, float* dscores);

// ---- embedding_kernels.cu ----
// pe: the positional encodings (len, dim), or null when len == 0.
void LaunchEmbeddingForward(cudaStream_t stream, size_t n, int dim, const float* table, const int32_t* ids, float scale,
                            int len, const float* pe, float* out);
// Sorts token positions by id (stable radix sort), then each distinct id's row is summed by one
// block in token order, as the CPU backend does.
size_t EmbeddingBackwardWorkspaceBytes(size_t n);
void LaunchEmbeddingBackward(cudaStream_t stream, size_t n, int dim, const float* dout, const int32_t* ids, float scale,
                             float* dtable, void* workspace, size_t workspace_bytes);

// ---- cross_entropy_kernels.cu ----
void LaunchCrossEntropy(cudaStream_t stream, int rows, int vocab, float epsilon, const float* logits,
                        const int32_t* targets, int32_t pad_id, float* loss, float* correct, float* dlogits);

}  // namespace psformer::cuda_kernels

#endif  // PSFORMER_WORKER_BACKEND_CUDA_CUDA_KERNELS_H_
