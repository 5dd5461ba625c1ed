// The operator interface the model is written against (once), implemented by the CPU backend
// (OpenBLAS + loops) and later a CUDA backend. T is the arithmetic type: float for training,
// double for gradient checks.
//
// Conventions shared by every operation:
// - All pointers are device pointers from this backend's DeviceMemory (token ids too).
// - Matrices are row-major. GEMM follows BLAS semantics on row-major data:
//     C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C,  op(X) = X or X^T.
// - "Accumulate" outputs (parameter gradients) add into what is there; others overwrite.
// - Results are deterministic: the same inputs give the same bits on every call (fixed
//   reduction orders; no atomics whose order depends on timing).
// - Operations may run asynchronously on a device; DeviceMemory copies and Sum synchronise.
#ifndef PSFORMER_WORKER_BACKEND_BACKEND_H_
#define PSFORMER_WORKER_BACKEND_BACKEND_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "common/bfloat16.h"
#include "common/philox.h"
#include "common/status.h"
#include "worker/backend/device_buffer.h"
#include "worker/backend/range_downloader.h"
#include "worker/backend/range_uploader.h"

namespace psformer {

enum class Transpose { kNo, kYes };

// Where matrix (i, j) of a two-level batch starts, in elements past the first: i * outer + j * inner.
struct BatchStrides {
  int64_t outer = 0;
  int64_t inner = 0;
};

// Shape of a masked attention softmax over scores (batch, heads, queries, keys).
struct AttentionShape {
  int batch = 0;
  int heads = 0;
  int queries = 0;
  int keys = 0;
};

template <typename T>
class Backend : public DeviceMemory {
 public:
  template <typename E>
  DeviceBuffer<E> Allocate(size_t n) {
    return DeviceBuffer<E>(this, n);
  }

  // ---- Host memory the backend copies from and to ----
  // Pins host[0, bytes) while the returned handle lives, so copies to and from it are DMA at the
  // bus's speed (CUDA: cudaHostRegister). A backend whose memory is the host's pins nothing and
  // returns null; a failure to pin is logged (copies still work, slower) and returns null too.
  // Callable on any thread, and the handle may go on any.
  virtual std::shared_ptr<void> PinHostMemory(void* /*host*/, size_t /*bytes*/) { return nullptr; }

  // ---- Device time ----
  // Marks the start and the end of a span of the device's work (a training step's forward and
  // backward), in stream order. SpanSeconds is the device's time between the two marks, once the
  // work before the end mark is done (it may wait for that): the time the device spent on the
  // span, gaps where it waited for the host included. This default, for a backend that computes
  // on the calling thread, times the calls by the wall clock.
  virtual void MarkSpanStart() { span_start_ = std::chrono::steady_clock::now(); }
  virtual void MarkSpanEnd() { span_end_ = std::chrono::steady_clock::now(); }
  virtual double SpanSeconds() { return std::chrono::duration<double>(span_end_ - span_start_).count(); }

  // ---- Copies to the host in the background ----
  // A RangeDownloader of device[0, n) into host[0, n). This default copies each range as it is
  // started (ImmediateRangeDownloader); a device backend copies on a stream of its own.
  // Unavailable when the backend cannot set up its copies.
  // REQUIRES: this backend, device[0, n) and host[0, n) outlive the downloader.
  virtual StatusOr<std::unique_ptr<RangeDownloader>> MakeRangeDownloader(const T* device, T* host, size_t n) {
    return std::unique_ptr<RangeDownloader>(std::make_unique<ImmediateRangeDownloader<T>>(this, device, host, n));
  }

  // Uploads ranges of host[0, n) into device[0, n), elements of `element_bytes` (float, or bf16
  // parameters), each awaited where it is first read (range_uploader.h). REQUIRES: both arrays
  // outlive it; the host array pinned where copies must be DMA (PinHostMemory).
  virtual StatusOr<std::unique_ptr<RangeUploader>> MakeRangeUploader(const void* host, void* device, size_t n,
                                                                     size_t element_bytes) {
    return std::unique_ptr<RangeUploader>(std::make_unique<ImmediateRangeUploader>(this, host, device, n, element_bytes));
  }

  // Whether a RangeUploader's AddFrom copies from any host memory at the same speed (a backend
  // whose memory is the host's): then a worker's pulled pieces are uploaded from where they came
  // in, not first copied into its parameters' host array. A device backend whose copies are DMA
  // only from memory registered with its driver says false.
  virtual bool uploads_from_any_host_memory() const { return true; }

  // ---- bf16 on the wire (cluster.gradient_dtype, param_dtype BF16) ----
  // Whether the backend computes beside the host (a GPU): then a worker rounds its gradient to
  // bf16 there (RoundToBf16) and copies half the bytes off the device, and widens bf16
  // parameters there (WidenBf16) after copying half the bytes on, instead of leaving both to its
  // client's threads on the host. A backend whose memory is the host's says false: the work on
  // the thread that computes would only take that thread's time.
  virtual bool rounds_on_device() const { return false; }
  // out[i] = bf16(x[i]) for n elements, in stream order, bit for bit as FloatsToBf16
  // (common/bfloat16.h) rounds on the host. This default rounds on the calling thread.
  virtual void RoundToBf16(size_t n, const T* x, uint16_t* out) {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(static_cast<float>(x[i]));
  }
  // out[i] = x[i] widened from bf16 (exact), in stream order: bf16 parameters (cluster.param_dtype
  // BF16) uploaded as they came and widened on the device.
  virtual void WidenBf16(size_t n, const uint16_t* x, T* out) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(Bf16ToFloat(x[i]));
  }
  // MakeRangeDownloader's twin for a bf16 array.
  virtual StatusOr<std::unique_ptr<RangeDownloader>> MakeBf16RangeDownloader(const uint16_t* device, uint16_t* host,
                                                                             size_t n) {
    return std::unique_ptr<RangeDownloader>(
        std::make_unique<ImmediateRangeDownloader<uint16_t>>(this, device, host, n));
  }

  // ---- Matrix products ----
  virtual void Gemm(Transpose ta, Transpose tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb,
                    T beta, T* c, int ldc) = 0;
  // `batch` independent GEMMs; matrix i starts at a + i*stride_a (likewise b, c).
  virtual void GemmStridedBatched(Transpose ta, Transpose tb, int m, int n, int k, T alpha, const T* a, int lda,
                                  int64_t stride_a, const T* b, int ldb, int64_t stride_b, T beta, T* c, int ldc,
                                  int64_t stride_c, int batch) = 0;

  // outer x inner independent GEMMs; matrix (i, j) of A starts at a + i*sa.outer + j*sa.inner
  // (likewise B, C). Attention reads its heads in place with it: head j of sentence i is the block
  // of rows i*len.. and columns j*head_dim.. of a (rows, ld) projection. This default runs
  // GemmStridedBatched over the longer level once per index of the shorter one.
  virtual void GemmBatched2(Transpose ta, Transpose tb, int m, int n, int k, T alpha, const T* a, int lda,
                            BatchStrides sa, const T* b, int ldb, BatchStrides sb, T beta, T* c, int ldc,
                            BatchStrides sc, int outer, int inner) {
    if (outer >= inner) {
      for (int j = 0; j < inner; ++j) {
        GemmStridedBatched(ta, tb, m, n, k, alpha, a + j * sa.inner, lda, sa.outer, b + j * sb.inner, ldb, sb.outer,
                           beta, c + j * sc.inner, ldc, sc.outer, outer);
      }
    } else {
      for (int i = 0; i < outer; ++i) {
        GemmStridedBatched(ta, tb, m, n, k, alpha, a + i * sa.outer, lda, sa.inner, b + i * sb.outer, ldb, sb.inner,
                           beta, c + i * sc.outer, ldc, sc.inner, inner);
      }
    }
  }

  // y (m, n) = x (m, k) w (k, n) + bias (n), row-major with leading dimensions k, n, n: an affine
  // layer's forward; then y = max(y, 0) when relu. The default runs Gemm, BiasAdd and
  // ReluForward; a backend may fuse them (one pass over y).
  virtual void GemmBias(int m, int n, int k, const T* x, const T* w, const T* bias, bool relu, T* y) {
    Gemm(Transpose::kNo, Transpose::kNo, m, n, k, T(1), x, k, w, n, T(0), y, n);
    BiasAdd(m, n, bias, y);
    if (relu) ReluForward(static_cast<size_t>(m) * n, y, y);
  }

  // ---- Attention helpers ----
  // probs = softmax over keys of (scale * scores), where key j of sentence b is masked (probability
  // 0) when key_tokens[b, j] == pad_id, and, if causal, when j > query index. A row with every key
  // masked gets all-zero probabilities. scores, probs: (batch, heads, queries, keys);
  // key_tokens: (batch, keys).
  virtual void MaskedSoftmaxForward(const AttentionShape& shape, T scale, const T* scores, const int32_t* key_tokens,
                                    int32_t pad_id, bool causal, T* probs) = 0;
  // dscores = scale * probs * (dprobs - sum_j probs * dprobs), row by row. Shapes as above.
  virtual void SoftmaxBackward(const AttentionShape& shape, T scale, const T* probs, const T* dprobs, T* dscores) = 0;
  // Copies columns [column, column + heads*head_dim) of x (batch*len rows, leading dimension ld)
  // into out (batch, heads, len, head_dim).
  virtual void SplitHeads(const T* x, int ld, int column, int batch, int len, int heads, int head_dim, T* out) = 0;
  // The inverse: x (batch, heads, len, head_dim) into columns [column, ...) of out (rows ld apart).
  virtual void MergeHeads(const T* x, int batch, int len, int heads, int head_dim, T* out, int ld, int column) = 0;

  // ---- Layer normalisation over the last dimension (rows, dim) ----
  // y = gamma * (x - mean) * rstd + beta; mean, rstd: (rows), kept for the backward.
  virtual void LayerNormForward(int rows, int dim, T epsilon, const T* x, const T* gamma, const T* beta, T* y, T* mean,
                                T* rstd) = 0;
  // dx = gradient w.r.t. x (overwritten); dgamma, dbeta accumulate.
  virtual void LayerNormBackward(int rows, int dim, const T* dy, const T* x, const T* gamma, const T* mean,
                                 const T* rstd, T* dx, T* dgamma, T* dbeta) = 0;

  // ---- Dropout (masks from common/philox.h, reproducible on every backend) ----
  // mask[i] = keep ? 1/(1-p) : 0 for element i of site `tensor`; y = x * mask. p == 0 gives mask 1.
  // x and y may alias.
  virtual void DropoutForward(size_t n, float p, const DropoutKey& key, uint32_t tensor, const T* x, T* y, T* mask) = 0;

  // ---- Embeddings ----
  // out (n, dim) = scale * table[ids[i]] (+ positional encoding of position i % len when len > 0:
  // PE(pos, 2i) = sin(pos / 10000^(2i/dim)), PE(pos, 2i+1) = cos(same)).
  virtual void EmbeddingForward(size_t n, int dim, const T* table, const int32_t* ids, T scale, int len, T* out) = 0;
  // dtable[ids[i]] += scale * dout[i], summed in token order (deterministic).
  virtual void EmbeddingBackward(size_t n, int dim, const T* dout, const int32_t* ids, T scale, T* dtable) = 0;

  // ---- Elementwise and reductions ----
  virtual void Fill(size_t n, T value, T* x) = 0;
  virtual void Copy(size_t n, const T* x, T* y) = 0;
  // z = x + y (z may alias either).
  virtual void Add(size_t n, const T* x, const T* y, T* z) = 0;
  // y += x.
  virtual void Accumulate(size_t n, const T* x, T* y) = 0;
  // z = x * y elementwise (dropout backward: dx = dy * mask).
  virtual void Multiply(size_t n, const T* x, const T* y, T* z) = 0;
  // x (rows, cols) += bias (cols) on every row.
  virtual void BiasAdd(int rows, int cols, const T* bias, T* x) = 0;
  // dbias (cols) += column sums of dy (rows, cols).
  virtual void BiasBackward(int rows, int cols, const T* dy, T* dbias) = 0;
  // y = max(x, 0) (may alias).
  virtual void ReluForward(size_t n, const T* x, T* y) = 0;
  // dx = y > 0 ? dy : 0, y the forward output (dx may alias dy).
  virtual void ReluBackward(size_t n, const T* y, const T* dy, T* dx) = 0;
  // The sum of x, in double, returned to the host.
  virtual double Sum(size_t n, const T* x) = 0;
  // The sums of x and of y, returned to the host together: a device backend waits for its
  // stream once, not twice. This default calls Sum twice.
  virtual std::pair<double, double> SumPair(size_t n, const T* x, const T* y) { return {Sum(n, x), Sum(n, y)}; }

  // ---- Loss ----
  // Label-smoothed cross entropy over logits (rows, vocab) with targets (rows); the definition
  // PyTorch uses: loss_r = (1-eps) * (-log p[target]) + eps * mean_v(-log p[v]). Rows whose
  // target is pad_id count nothing. Writes loss (rows) (0 for pad rows), correct (rows) (1 where
  // argmax == target, first maximum wins), and, when dlogits is not null, the gradient of the
  // summed loss: dlogits = softmax - ((1-eps) onehot + eps/vocab), zero on pad rows. dlogits may
  // alias logits.
  virtual void CrossEntropy(int rows, int vocab, T epsilon, const T* logits, const int32_t* targets, int32_t pad_id,
                            T* loss, T* correct, T* dlogits) = 0;

 private:
  std::chrono::steady_clock::time_point span_start_, span_end_;  // the default span marks
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_BACKEND_H_
