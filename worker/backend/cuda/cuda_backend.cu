// CudaBackend (cuda_backend.h): device setup, memory, cuBLAS matrix products, and the operations
// that forward to the kernel launchers of cuda_kernels.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/trace.h"
#include "worker/backend/cuda/column_sum.cuh"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"
#include "worker/backend/cuda/cuda_range_downloader.h"
#include "worker/backend/cuda/cuda_range_uploader.h"
#include "worker/backend/cuda/host_staging.h"
#include "worker/backend/cuda/lt_affine.h"

namespace psformer {
namespace {

namespace k = cuda_kernels;

cublasOperation_t ToCublas(Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

cublasComputeType_t CublasComputeType(GemmMath math) {
  switch (math) {
    case GemmMath::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmMath::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GemmMath::kFp32:
      break;
  }
  // Tensor-core math is never enabled on the handle, so this is IEEE fp32.
  return CUBLAS_COMPUTE_32F;
}

const char* GemmMathName(GemmMath math) {
  switch (math) {
    case GemmMath::kTf32:
      return "tf32";
    case GemmMath::kBf16:
      return "bf16";
    case GemmMath::kFp32:
      break;
  }
  return "fp32";
}

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& options) {
  const int count = CudaDeviceCount();
  if (count == 0) return Status::Unavailable(CudaUnavailableReason());
  if (options.device < 0 || options.device >= count) {
    return Status::InvalidArgument("CUDA device " + std::to_string(options.device) + " does not exist (" +
                                   std::to_string(count) + " visible)");
  }
  cudaError_t err = cudaSetDevice(options.device);
  cudaDeviceProp props{};
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&props, options.device);
  cudaStream_t stream = nullptr;
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    return Status::Unavailable("cannot start CUDA device " + std::to_string(options.device) + ": " +
                               cudaGetErrorString(err));
  }
  cublasHandle_t cublas = nullptr;
  const cublasStatus_t st = cublasCreate(&cublas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream);
    return Status::Unavailable(std::string("cannot start cuBLAS on CUDA device ") + std::to_string(options.device) +
                               ": " + cublasGetStatusString(st));
  }
  PSF_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  auto backend =
      std::make_unique<CudaBackend>(ConstructionKey(), options.device, props.name, options.gemm_math, stream, cublas);
  // A workspace of our own: cuBLAS then never allocates during a step.
  if (options.cublas_workspace_bytes > 0) {
    backend->cublas_workspace_ = backend->Allocate<char>(options.cublas_workspace_bytes);
    PSF_CUBLAS_CHECK(cublasSetWorkspace(cublas, backend->cublas_workspace_.data(), options.cublas_workspace_bytes));
  }
  if (options.fused_epilogues) {
    // Fused epilogues are a speed-up: without cuBLASLt the products run unfused, as with
    // fused_epilogues off, rather than the worker not starting.
    StatusOr<std::unique_ptr<LtAffine>> lt = LtAffine::Create();
    if (lt.ok()) {
      backend->lt_affine_ = std::move(lt).value();
      backend->lt_workspace_ = backend->Allocate<char>(options.cublas_workspace_bytes);
    } else {
      PSF_LOG(Warning) << lt.status().message() << "; matrix products run without fused epilogues";
    }
  }
  backend->sum_result_ = backend->Allocate<double>(2);
  // Spelled out: nvcc (C++17) will not move into the converting constructor, g++ calls std::move redundant.
  return StatusOr<std::unique_ptr<CudaBackend>>(std::move(backend));
}

CudaBackend::CudaBackend(ConstructionKey, int device, std::string device_name, GemmMath math, CUstream_st* stream,
                         cublasContext* cublas)
    : device_(device), device_name_(std::move(device_name)), gemm_math_(math), stream_(stream), cublas_(cublas) {}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  if (span_start_ != nullptr) cudaEventDestroy(span_start_);
  if (span_end_ != nullptr) cudaEventDestroy(span_end_);
  if (stream_done_ != nullptr) cudaEventDestroy(stream_done_);
  workspace_ = DeviceBuffer<char>();
  cublas_workspace_ = DeviceBuffer<char>();
  lt_workspace_ = DeviceBuffer<char>();
  lt_affine_.reset();
  staging_.reset();
  sum_result_ = DeviceBuffer<double>();
  pe_ = DeviceBuffer<float>();
  cublasDestroy(cublas_);
  cudaStreamDestroy(stream_);
}

void* CudaBackend::AllocateBytes(size_t bytes) {
  void* ptr = allocator_.Allocate(bytes);
  PSF_CUDA_CHECK(cudaMemsetAsync(ptr, 0, std::max<size_t>(bytes, 1), stream_));
  return ptr;
}

void CudaBackend::FreeBytes(void* ptr) { allocator_.Free(ptr); }

void CudaBackend::AwaitStream() {
  if (stream_done_ == nullptr) {
    PSF_CUDA_CHECK(cudaEventCreateWithFlags(&stream_done_, cudaEventBlockingSync | cudaEventDisableTiming));
  }
  PSF_CUDA_CHECK(cudaEventRecord(stream_done_, stream_));
  PSF_CUDA_CHECK(cudaEventSynchronize(stream_done_));
}

void CudaBackend::CopyToDevice(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  PSF_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  AwaitStream();
}

void CudaBackend::StageToDevice(void* device_dst, const void* host_src, size_t bytes) {
  if (!staging_) staging_ = std::make_unique<HostStaging>();
  staging_->Copy(stream_, device_dst, host_src, bytes);
}

size_t CudaBackend::staging_blocks() const { return staging_ ? staging_->blocks() : 0; }

void CudaBackend::CopyToHost(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  // Asleep until the work before the copy is done (a copy into pageable memory would wait for it
  // in cudaMemcpyAsync itself); then only the copy is waited for.
  AwaitStream();
  PSF_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  PSF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::Synchronize() { AwaitStream(); }

StatusOr<std::unique_ptr<RangeDownloader>> CudaBackend::MakeRangeDownloader(const float* device, float* host,
                                                                            size_t n) {
  PSF_ASSIGN_OR_RETURN(std::unique_ptr<CudaRangeDownloader> downloader,
                       CudaRangeDownloader::Create(stream_, device, host, n, sizeof(float), &timeline_));
  return StatusOr<std::unique_ptr<RangeDownloader>>(std::unique_ptr<RangeDownloader>(std::move(downloader)));
}

StatusOr<std::unique_ptr<RangeUploader>> CudaBackend::MakeRangeUploader(const void* host, void* device, size_t n,
                                                                        size_t element_bytes) {
  PSF_ASSIGN_OR_RETURN(std::unique_ptr<CudaRangeUploader> uploader,
                       CudaRangeUploader::Create(stream_, host, device, n, element_bytes, &timeline_));
  return StatusOr<std::unique_ptr<RangeUploader>>(std::unique_ptr<RangeUploader>(std::move(uploader)));
}

StatusOr<std::unique_ptr<RangeDownloader>> CudaBackend::MakeBf16RangeDownloader(const uint16_t* device, uint16_t* host,
                                                                                size_t n) {
  PSF_ASSIGN_OR_RETURN(std::unique_ptr<CudaRangeDownloader> downloader,
                       CudaRangeDownloader::Create(stream_, device, host, n, sizeof(uint16_t), &timeline_));
  return StatusOr<std::unique_ptr<RangeDownloader>>(std::unique_ptr<RangeDownloader>(std::move(downloader)));
}

void CudaBackend::RoundToBf16(size_t n, const float* x, uint16_t* out) { k::LaunchRoundToBf16(stream_, n, x, out); }
void CudaBackend::WidenBf16(size_t n, const uint16_t* x, float* out) { k::LaunchWidenBf16(stream_, n, x, out); }

std::shared_ptr<void> CudaBackend::PinHostMemory(void* host, size_t bytes) {
  if (bytes == 0) return nullptr;
  // Callable on any thread (the client's registers the peers' shared memory as it maps it): the
  // device made current there, so no other device gets a context, and portable, so that the
  // registration holds whichever thread's context copies from it.
  const auto start = std::chrono::steady_clock::now();
  cudaError_t err = cudaSetDevice(device_);
  if (err == cudaSuccess) err = cudaHostRegister(host, bytes, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky, but keep it out of later launch checks
    PSF_LOG(Warning) << "cannot pin " << (bytes >> 20) << " MiB of host memory (" << cudaGetErrorString(err)
                     << "); the GPU does not copy it by DMA (a copy to the device reads it as pageable memory, at a "
                        "fraction of the bus's speed; a server's shared memory is copied into pinned memory first)";
    return nullptr;
  }
  // On whichever thread asked (the client's, for a server's segment as it is first mapped): said,
  // so that a GPU run's log shows what pinning costs there.
  PSF_LOG(Info) << "pinned " << (bytes >> 20) << " MiB of host memory in "
                << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() << " ms";
  return std::shared_ptr<void>(host, [bytes, device = device_](void* p) {
    cudaError_t unpinned = cudaSetDevice(device);
    if (unpinned == cudaSuccess) unpinned = cudaHostUnregister(p);
    if (unpinned != cudaSuccess) {
      cudaGetLastError();
      PSF_LOG(Warning) << "unpinning " << (bytes >> 20)
                       << " MiB of host memory failed: " << cudaGetErrorString(unpinned);
    }
  });
}

void CudaBackend::MarkSpanStart() {
  if (span_start_ == nullptr) {
    // Blocking sync: SpanSeconds sleeps rather than spins while the span's work finishes.
    PSF_CUDA_CHECK(cudaEventCreateWithFlags(&span_start_, cudaEventBlockingSync));
    PSF_CUDA_CHECK(cudaEventCreateWithFlags(&span_end_, cudaEventBlockingSync));
  }
  PSF_CUDA_CHECK(cudaEventRecord(span_start_, stream_));
  timeline_.Mark(stream_);
}

void CudaBackend::MarkSpanEnd() { PSF_CUDA_CHECK(cudaEventRecord(span_end_, stream_)); }

double CudaBackend::SpanSeconds() {
  if (span_end_ == nullptr) return 0;
  PSF_CUDA_CHECK(cudaEventSynchronize(span_end_));
  float ms = 0;
  PSF_CUDA_CHECK(cudaEventElapsedTime(&ms, span_start_, span_end_));
  if (Trace::on()) timeline_.Emit(timeline_.current(), DeviceLane::kCompute, "step_span", nullptr, span_end_, -1, -1);
  return ms / 1000.0;
}

void* CudaBackend::Workspace(size_t bytes) { return workspace_.Reserve(this, std::max<size_t>(bytes, 1)); }

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets the operands
// swapped and m, n exchanged; the leading dimensions carry over unchanged.
void CudaBackend::Gemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
                       const float* b, int ldb, float beta, float* c, int ldc) {
  PSF_CHECK(m >= 0 && n >= 0 && k >= 0);
  if (m == 0 || n == 0) return;
  PSF_CUBLAS_CHECK(cublasGemmEx(cublas_, ToCublas(tb), ToCublas(ta), n, m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F,
                                lda, &beta, c, CUDA_R_32F, ldc, CublasComputeType(gemm_math_), CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::GemmStridedBatched(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a,
                                     int lda, int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta,
                                     float* c, int ldc, int64_t stride_c, int batch) {
  PSF_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0);
  if (m == 0 || n == 0 || batch == 0) return;
  PSF_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_, ToCublas(tb), ToCublas(ta), n, m, k, &alpha, b, CUDA_R_32F, ldb,
                                              stride_b, a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc,
                                              stride_c, batch, CublasComputeType(gemm_math_), CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::GemmBias(int m, int n, int k, const float* x, const float* w, const float* bias, bool relu,
                           float* y) {
  PSF_CHECK(m >= 0 && n >= 0 && k >= 0);
  if (m == 0 || n == 0) return;
  // k == 0 would leave the product undefined in cuBLASLt; the default composition handles it.
  if (lt_affine_ != nullptr && k > 0 &&
      lt_affine_->Run(stream_, gemm_math_, m, n, k, x, w, bias, relu, y, lt_workspace_.data(), lt_workspace_.size())) {
    return;
  }
  Backend<float>::GemmBias(m, n, k, x, w, bias, relu, y);
}

void CudaBackend::MaskedSoftmaxForward(const AttentionShape& shape, float scale, const float* scores,
                                       const int32_t* key_tokens, int32_t pad_id, bool causal, float* probs) {
  k::LaunchMaskedSoftmaxForward(stream_, shape, scale, scores, key_tokens, pad_id, causal, probs);
}

void CudaBackend::SoftmaxBackward(const AttentionShape& shape, float scale, const float* probs, const float* dprobs,
                                  float* dscores) {
  k::LaunchSoftmaxBackward(stream_, shape, scale, probs, dprobs, dscores);
}

void CudaBackend::SplitHeads(const float* x, int ld, int column, int batch, int len, int heads, int head_dim,
                             float* out) {
  k::LaunchSplitHeads(stream_, x, ld, column, batch, len, heads, head_dim, out);
}

void CudaBackend::MergeHeads(const float* x, int batch, int len, int heads, int head_dim, float* out, int ld,
                             int column) {
  k::LaunchMergeHeads(stream_, x, batch, len, heads, head_dim, out, ld, column);
}

void CudaBackend::LayerNormForward(int rows, int dim, float epsilon, const float* x, const float* gamma,
                                   const float* beta, float* y, float* mean, float* rstd) {
  k::LaunchLayerNormForward(stream_, rows, dim, epsilon, x, gamma, beta, y, mean, rstd);
}

void CudaBackend::LayerNormBackward(int rows, int dim, const float* dy, const float* x, const float* gamma,
                                    const float* mean, const float* rstd, float* dx, float* dgamma, float* dbeta) {
  void* ws = Workspace(2 * k::ColumnSumWorkspaceBytes(rows, dim));
  k::LaunchLayerNormBackward(stream_, rows, dim, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, ws);
}

void CudaBackend::DropoutForward(size_t n, float p, const DropoutKey& key, uint32_t tensor, const float* x, float* y,
                                 float* mask) {
  k::LaunchDropoutForward(stream_, n, p, key, tensor, x, y, mask);
}

const float* CudaBackend::PositionalEncoding(int len, int dim) {
  if (len > pe_len_ || dim != pe_dim_) {
    const int new_len = std::max(len, dim == pe_dim_ ? pe_len_ : 0);
    std::vector<float> host(static_cast<size_t>(new_len) * dim);  // (new_len, dim)
    for (int pos = 0; pos < new_len; ++pos) {
      for (int i = 0; i < dim; ++i) {
        const double angle = pos / std::pow(10000.0, static_cast<double>(i - i % 2) / dim);
        host[static_cast<size_t>(pos) * dim + i] = static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    }
    pe_ = Allocate<float>(host.size());
    pe_.Upload(host.data(), host.size());
    pe_len_ = new_len;
    pe_dim_ = dim;
  }
  return pe_.data();
}

void CudaBackend::EmbeddingForward(size_t n, int dim, const float* table, const int32_t* ids, float scale, int len,
                                   float* out) {
  const float* pe = len > 0 ? PositionalEncoding(len, dim) : nullptr;
  k::LaunchEmbeddingForward(stream_, n, dim, table, ids, scale, len, pe, out);
}

void CudaBackend::EmbeddingBackward(size_t n, int dim, const float* dout, const int32_t* ids, float scale,
                                    float* dtable) {
  if (n == 0) return;
  const size_t bytes = k::EmbeddingBackwardWorkspaceBytes(n);
  k::LaunchEmbeddingBackward(stream_, n, dim, dout, ids, scale, dtable, Workspace(bytes), bytes);
}

void CudaBackend::Fill(size_t n, float value, float* x) { k::LaunchFill(stream_, n, value, x); }
void CudaBackend::Copy(size_t n, const float* x, float* y) { k::LaunchCopy(stream_, n, x, y); }
void CudaBackend::Add(size_t n, const float* x, const float* y, float* z) { k::LaunchAdd(stream_, n, x, y, z); }
void CudaBackend::Accumulate(size_t n, const float* x, float* y) { k::LaunchAccumulate(stream_, n, x, y); }
void CudaBackend::Multiply(size_t n, const float* x, const float* y, float* z) {
  k::LaunchMultiply(stream_, n, x, y, z);
}
void CudaBackend::BiasAdd(int rows, int cols, const float* bias, float* x) {
  k::LaunchBiasAdd(stream_, rows, cols, bias, x);
}
void CudaBackend::BiasBackward(int rows, int cols, const float* dy, float* dbias) {
  k::LaunchBiasBackward(stream_, rows, cols, dy, dbias, Workspace(k::ColumnSumWorkspaceBytes(rows, cols)));
}
void CudaBackend::ReluForward(size_t n, const float* x, float* y) { k::LaunchReluForward(stream_, n, x, y); }
void CudaBackend::ReluBackward(size_t n, const float* y, const float* dy, float* dx) {
  k::LaunchReluBackward(stream_, n, y, dy, dx);
}

double CudaBackend::Sum(size_t n, const float* x) {
  k::LaunchSum(stream_, n, x, sum_result_.data(), Workspace(k::SumWorkspaceBytes()));
  double result = 0;
  CopyToHost(&result, sum_result_.data(), sizeof(double));
  return result;
}

std::pair<double, double> CudaBackend::SumPair(size_t n, const float* x, const float* y) {
  // One after the other on the stream: the workspace serves both.
  k::LaunchSum(stream_, n, x, sum_result_.data(), Workspace(k::SumWorkspaceBytes()));
  k::LaunchSum(stream_, n, y, sum_result_.data() + 1, Workspace(k::SumWorkspaceBytes()));
  double result[2] = {0, 0};
  CopyToHost(result, sum_result_.data(), sizeof(result));
  return {result[0], result[1]};
}

void CudaBackend::CrossEntropy(int rows, int vocab, float epsilon, const float* logits, const int32_t* targets,
                               int32_t pad_id, float* loss, float* correct, float* dlogits) {
  k::LaunchCrossEntropy(stream_, rows, vocab, epsilon, logits, targets, pad_id, loss, correct, dlogits);
}

}  // namespace psformer
