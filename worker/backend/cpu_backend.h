// The CPU backend: OpenBLAS for matrix products, a blocking thread pool for loops elsewhere.
// Loops split work into fixed contiguous ranges and reductions run in a fixed order, so a given
// thread count always gives the same bits. (OpenBLAS may round differently with another thread
// count, so runs compare bitwise only at equal cluster.threads_per_process.)
// Matrix products below kGemmParallelFlops run on one OpenBLAS thread: threads cost more than
// they save there, and OpenBLAS's idle threads spin. Its thread count is process-wide state.
// Not thread-safe: one backend per thread of model code (it caches positional encodings).
#ifndef PSFORMER_WORKER_BACKEND_CPU_BACKEND_H_
#define PSFORMER_WORKER_BACKEND_CPU_BACKEND_H_

#include <string>
#include <vector>

#include "worker/backend/backend.h"
#include "worker/backend/thread_pool.h"

namespace psformer {

// The kernels OpenBLAS chose at start-up for this CPU ("Haswell", "Zen", "SkylakeX", ...), or the
// ones OPENBLAS_CORETYPE forced. They decide how matrix products round, so results are bitwise
// reproducible only between processes that report the same name (docs/reproducibility.md).
std::string BlasCoreName();

// How the OpenBLAS library this process runs was built ("OpenBLAS 0.3.21 DYNAMIC_ARCH
// NO_AFFINITY Haswell MAX_THREADS=64"), as it says itself.
std::string BlasLibraryDescription();

template <typename T>
class CpuBackend : public Backend<T> {
 public:
  // threads: worker threads for loops and OpenBLAS (0 = every core).
  explicit CpuBackend(int threads = 0);

  void* AllocateBytes(size_t bytes) override;
  void FreeBytes(void* ptr) override;
  void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) override;
  void CopyToHost(void* host_dst, const void* device_src, size_t bytes) override;
  void Synchronize() override {}

  void Gemm(Transpose ta, Transpose tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
            T* c, int ldc) override;
  void GemmStridedBatched(Transpose ta, Transpose tb, int m, int n, int k, T alpha, const T* a, int lda,
                          int64_t stride_a, const T* b, int ldb, int64_t stride_b, T beta, T* c, int ldc,
                          int64_t stride_c, int batch) override;
  void MaskedSoftmaxForward(const AttentionShape& shape, T scale, const T* scores, const int32_t* key_tokens,
                            int32_t pad_id, bool causal, T* probs) override;
  void SoftmaxBackward(const AttentionShape& shape, T scale, const T* probs, const T* dprobs, T* dscores) override;
  void SplitHeads(const T* x, int ld, int column, int batch, int len, int heads, int head_dim, T* out) override;
  void MergeHeads(const T* x, int batch, int len, int heads, int head_dim, T* out, int ld, int column) override;
  void LayerNormForward(int rows, int dim, T epsilon, const T* x, const T* gamma, const T* beta, T* y, T* mean,
                        T* rstd) override;
  void LayerNormBackward(int rows, int dim, const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd,
                         T* dx, T* dgamma, T* dbeta) override;
  void DropoutForward(size_t n, float p, const DropoutKey& key, uint32_t tensor, const T* x, T* y, T* mask) override;
  void EmbeddingForward(size_t n, int dim, const T* table, const int32_t* ids, T scale, int len, T* out) override;
  void EmbeddingBackward(size_t n, int dim, const T* dout, const int32_t* ids, T scale, T* dtable) override;
  void Fill(size_t n, T value, T* x) override;
  void Copy(size_t n, const T* x, T* y) override;
  void Add(size_t n, const T* x, const T* y, T* z) override;
  void Accumulate(size_t n, const T* x, T* y) override;
  void Multiply(size_t n, const T* x, const T* y, T* z) override;
  void BiasAdd(int rows, int cols, const T* bias, T* x) override;
  void BiasBackward(int rows, int cols, const T* dy, T* dbias) override;
  void ReluForward(size_t n, const T* x, T* y) override;
  void ReluBackward(size_t n, const T* y, const T* dy, T* dx) override;
  double Sum(size_t n, const T* x) override;
  void CrossEntropy(int rows, int vocab, T epsilon, const T* logits, const int32_t* targets, int32_t pad_id, T* loss,
                    T* correct, T* dlogits) override;

  int threads() const { return threads_; }

 private:
  // Positional encodings (len, dim), computed in double once and kept while shapes fit.
  const T* PositionalEncoding(int len, int dim);

  // body(begin, end) over [0, n), split across the pool when `work` (elements touched) is
  // large enough to pay for waking threads.
  template <typename F>
  void For(int64_t n, int64_t work, F&& body);
  void SetBlasThreads(int threads);
  // SplitHeads (kToHeads) and MergeHeads.
  template <bool kToHeads>
  void CopyHeads(const T* from, T* to, int ld, int column, int batch, int len, int heads, int head_dim);

  int threads_;
  ThreadPool pool_;
  int blas_threads_ = 0;
  std::vector<T> pe_;
  int pe_len_ = 0;
  int pe_dim_ = 0;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CPU_BACKEND_H_
