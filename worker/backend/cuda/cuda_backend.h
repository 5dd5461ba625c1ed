// The CUDA backend: Backend<float> on one NVIDIA GPU. Storage is fp32; matrix products go
// through cuBLAS with a selectable math mode (strict FP32, TF32, or BF16 inputs with fp32
// accumulation on tensor cores); every other operation is a kernel of this folder
// (cuda_kernels.h) with the CPU backend's semantics: identical Philox dropout masks, the same
// masking and label smoothing, deterministic reductions (fixed orders, no timing-dependent
// atomics). All work goes to one stream, in issue order; DeviceMemory copies and Sum wait for it
// (asleep, on a blocking-sync event), except StageToDevice.
// The exception is MakeRangeDownloader: its copies to the host run on a copy stream of their own
// into pinned host memory (cuda_range_downloader.h; unverified on a GPU so far).
// Device memory comes from a caching allocator (caching_allocator.h), so the step loop reaches
// cudaMalloc only while batch shapes still grow.
//
// CUDA or cuBLAS failures inside an operation abort with a message naming the call, file and line
// (the Backend contract has no error channel; a failing device mid-step is not recoverable);
// failures to start (no device, bad ordinal) come back from Create as a Status.
//
// This header includes no CUDA header, so host code built by the C++ compiler can use it.
// REQUIRES: one backend per thread, and that thread's current CUDA device is the backend's
// (Create makes it so). Buffers from this backend are destroyed before it.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_CUDA_BACKEND_H_
#define PSFORMER_WORKER_BACKEND_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>
#include <utility>

#include "common/status.h"
#include "worker/backend/backend.h"
#include "worker/backend/cuda/caching_allocator.h"
#include "worker/backend/cuda/cuda_device.h"
#include "worker/backend/cuda/device_timeline.h"

struct CUstream_st;
struct CUevent_st;
struct cublasContext;

namespace psformer {

// How cuBLAS multiplies fp32 matrices.
enum class GemmMath {
  kFp32,  // IEEE fp32 multiply-adds (the reference; matches the CPU backend to ~1e-6)
  kTf32,  // tensor cores, inputs rounded to TF32 (10-bit mantissa), fp32 accumulation
  kBf16,  // tensor cores, inputs rounded to bf16 (7-bit mantissa), fp32 accumulation
};

// "fp32", "tf32" or "bf16".
const char* GemmMathName(GemmMath math);

struct CudaBackendOptions {
  int device = 0;                            // CUDA device ordinal
  GemmMath gemm_math = GemmMath::kFp32;      // see GemmMath
  size_t cublas_workspace_bytes = 32 << 20;  // cuBLAS scratch, allocated once
  // GemmBias through cuBLASLt with the bias (and ReLU) in the product's epilogue; false: a
  // product, then bias and ReLU kernels (the default Backend composition).
  bool fused_epilogues = true;
};

class LtAffine;
class HostStaging;

class CudaBackend final : public Backend<float> {
 public:
  // Unavailable ("no CUDA device: ...") without a usable device; InvalidArgument for an ordinal
  // out of range.
  static StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);

  // Only Create can make the key: it is the way to a backend.
  class ConstructionKey {
    friend class CudaBackend;
    ConstructionKey() = default;
  };
  CudaBackend(ConstructionKey, int device, std::string device_name, GemmMath math, CUstream_st* stream,
              cublasContext* cublas);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  void* AllocateBytes(size_t bytes) override;
  void FreeBytes(void* ptr) override;
  void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) override;
  void CopyToHost(void* host_dst, const void* device_src, size_t bytes) override;
  // Through pinned blocks (host_staging.h): the launching thread does not wait.
  void StageToDevice(void* device_dst, const void* host_src, size_t bytes) override;
  void Synchronize() override;
  // Pageable memory (a peer's shared-memory segment, unregistered) would be copied synchronously.
  bool uploads_from_any_host_memory() const override { return false; }
  StatusOr<std::unique_ptr<RangeDownloader>> MakeRangeDownloader(const float* device, float* host, size_t n) override;
  StatusOr<std::unique_ptr<RangeUploader>> MakeRangeUploader(const void* host, void* device, size_t n,
                                                             size_t element_bytes) override;
  // bf16 gradients are rounded here and bf16 parameters widened here, by kernels: half the bytes
  // cross the bus.
  bool rounds_on_device() const override { return true; }
  void RoundToBf16(size_t n, const float* x, uint16_t* out) override;
  void WidenBf16(size_t n, const uint16_t* x, float* out) override;
  StatusOr<std::unique_ptr<RangeDownloader>> MakeBf16RangeDownloader(const uint16_t* device, uint16_t* host,
                                                                     size_t n) override;
  std::shared_ptr<void> PinHostMemory(void* host, size_t bytes) override;
  // Timing events on the stream: the span is the GPU's, not the launching thread's.
  void MarkSpanStart() override;
  void MarkSpanEnd() override;
  double SpanSeconds() override;

  void Gemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
            int ldb, float beta, float* c, int ldc) override;
  void GemmStridedBatched(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
                          int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta, float* c, int ldc,
                          int64_t stride_c, int batch) override;
  void GemmBias(int m, int n, int k, const float* x, const float* w, const float* bias, bool relu, float* y) override;
  void MaskedSoftmaxForward(const AttentionShape& shape, float scale, const float* scores, const int32_t* key_tokens,
                            int32_t pad_id, bool causal, float* probs) override;
  void SoftmaxBackward(const AttentionShape& shape, float scale, const float* probs, const float* dprobs,
                       float* dscores) override;
  void SplitHeads(const float* x, int ld, int column, int batch, int len, int heads, int head_dim, float* out) override;
  void MergeHeads(const float* x, int batch, int len, int heads, int head_dim, float* out, int ld, int column) override;
  void LayerNormForward(int rows, int dim, float epsilon, const float* x, const float* gamma, const float* beta,
                        float* y, float* mean, float* rstd) override;
  void LayerNormBackward(int rows, int dim, const float* dy, const float* x, const float* gamma, const float* mean,
                         const float* rstd, float* dx, float* dgamma, float* dbeta) override;
  void DropoutForward(size_t n, float p, const DropoutKey& key, uint32_t tensor, const float* x, float* y,
                      float* mask) override;
  void EmbeddingForward(size_t n, int dim, const float* table, const int32_t* ids, float scale, int len,
                        float* out) override;
  void EmbeddingBackward(size_t n, int dim, const float* dout, const int32_t* ids, float scale, float* dtable) override;
  void Fill(size_t n, float value, float* x) override;
  void Copy(size_t n, const float* x, float* y) override;
  void Add(size_t n, const float* x, const float* y, float* z) override;
  void Accumulate(size_t n, const float* x, float* y) override;
  void Multiply(size_t n, const float* x, const float* y, float* z) override;
  void BiasAdd(int rows, int cols, const float* bias, float* x) override;
  void BiasBackward(int rows, int cols, const float* dy, float* dbias) override;
  void ReluForward(size_t n, const float* x, float* y) override;
  void ReluBackward(size_t n, const float* y, const float* dy, float* dx) override;
  double Sum(size_t n, const float* x) override;
  std::pair<double, double> SumPair(size_t n, const float* x, const float* y) override;
  void CrossEntropy(int rows, int vocab, float epsilon, const float* logits, const int32_t* targets, int32_t pad_id,
                    float* loss, float* correct, float* dlogits) override;

  GemmMath gemm_math() const { return gemm_math_; }
  void set_gemm_math(GemmMath math) { gemm_math_ = math; }
  int device() const { return device_; }
  const std::string& device_name() const { return device_name_; }
  // Device memory handed out by the caching allocator (peaks since creation).
  const DeviceMemoryStats& memory_stats() const { return allocator_.stats(); }
  // Pinned blocks StageToDevice has made so far.
  size_t staging_blocks() const;

 private:
  // Scratch for one operation at a time (ops run in stream order, so one buffer serves all).
  void* Workspace(size_t bytes);
  // Returns once the work issued so far is done, asleep (a blocking-sync event): a thread that
  // spins in cudaStreamSynchronize holds a core the host's passes need.
  void AwaitStream();
  // Positional encodings (len, dim) on the device, computed on the host in double exactly as
  // the CPU backend computes them, and kept while shapes fit.
  const float* PositionalEncoding(int len, int dim);

  int device_;
  std::string device_name_;
  GemmMath gemm_math_;
  CUstream_st* stream_;
  cublasContext* cublas_;
  CUevent_st* span_start_ = nullptr;  // timing events of MarkSpanStart / MarkSpanEnd, made on first use
  CUevent_st* span_end_ = nullptr;
  CUevent_st* stream_done_ = nullptr;    // AwaitStream's, made on first use
  DeviceTimeline timeline_;              // each MarkSpanStart's anchor, for the trace's device lanes
  std::unique_ptr<LtAffine> lt_affine_;  // null without fused epilogues
  std::unique_ptr<HostStaging> staging_;  // StageToDevice's blocks, made on first use
  // Declared before every buffer: buffers are freed into it when the backend goes.
  CachingAllocator allocator_;
  DeviceBuffer<char> workspace_;
  DeviceBuffer<char> cublas_workspace_;
  DeviceBuffer<char> lt_workspace_;  // cuBLASLt's scratch for lt_affine_
  DeviceBuffer<double> sum_result_;  // (2): Sum's, SumPair's
  DeviceBuffer<float> pe_;           // (pe_len_, pe_dim_)
  int pe_len_ = 0;
  int pe_dim_ = 0;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_CUDA_BACKEND_H_
