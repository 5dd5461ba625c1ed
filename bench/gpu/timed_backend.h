// A Backend<float> that forwards every operation to another backend and adds up, per operation,
// the wall time from issue to completion (it synchronises before and after each call). For the
// GPU benchmark's --profile breakdown only: the synchronisations serialise the work, so the total
// exceeds an unprofiled step, but the split shows where the time goes.
#ifndef PSFORMER_BENCH_GPU_TIMED_BACKEND_H_
#define PSFORMER_BENCH_GPU_TIMED_BACKEND_H_

#include <chrono>
#include <map>
#include <string>

#include "worker/backend/backend.h"

namespace psformer {

class TimedBackend final : public Backend<float> {
 public:
  struct Entry {
    int64_t calls = 0;
    double seconds = 0;
  };
  // vocab: matrix products with a dimension of this size are listed as "Gemm (vocab)".
  TimedBackend(Backend<float>* inner, int vocab) : inner_(inner), vocab_(vocab) {}
  const std::map<std::string, Entry>& entries() const { return entries_; }
  void Reset() { entries_.clear(); }

  void* AllocateBytes(size_t bytes) override { return inner_->AllocateBytes(bytes); }
  void FreeBytes(void* ptr) override { inner_->FreeBytes(ptr); }
  void CopyToDevice(void* d, const void* h, size_t bytes) override {
    Time("CopyToDevice", [&] { inner_->CopyToDevice(d, h, bytes); });
  }
  void CopyToHost(void* h, const void* d, size_t bytes) override {
    Time("CopyToHost", [&] { inner_->CopyToHost(h, d, bytes); });
  }
  void Synchronize() override { inner_->Synchronize(); }

  void Gemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
            int ldb, float beta, float* c, int ldc) override {
    // Named by shape class: the vocabulary projection dominates and deserves its own line.
    Time(m == vocab_ || n == vocab_ || k == vocab_ ? "Gemm (vocab)" : "Gemm",
         [&] { inner_->Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
  }
  void GemmStridedBatched(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
                          int64_t sa, const float* b, int ldb, int64_t sb, float beta, float* c, int ldc, int64_t sc,
                          int batch) override {
    Time("GemmStridedBatched",
         [&] { inner_->GemmStridedBatched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch); });
  }
  void GemmBias(int m, int n, int k, const float* x, const float* w, const float* bias, bool relu, float* y) override {
    Time(m == vocab_ || n == vocab_ || k == vocab_ ? "GemmBias (vocab)" : "GemmBias",
         [&] { inner_->GemmBias(m, n, k, x, w, bias, relu, y); });
  }
  void MaskedSoftmaxForward(const AttentionShape& s, float scale, const float* scores, const int32_t* keys, int32_t pad,
                            bool causal, float* probs) override {
    Time("MaskedSoftmaxForward", [&] { inner_->MaskedSoftmaxForward(s, scale, scores, keys, pad, causal, probs); });
  }
  void SoftmaxBackward(const AttentionShape& s, float scale, const float* p, const float* dp, float* ds) override {
    Time("SoftmaxBackward", [&] { inner_->SoftmaxBackward(s, scale, p, dp, ds); });
  }
  void SplitHeads(const float* x, int ld, int col, int b, int len, int h, int hd, float* out) override {
    Time("SplitHeads", [&] { inner_->SplitHeads(x, ld, col, b, len, h, hd, out); });
  }
  void MergeHeads(const float* x, int b, int len, int h, int hd, float* out, int ld, int col) override {
    Time("MergeHeads", [&] { inner_->MergeHeads(x, b, len, h, hd, out, ld, col); });
  }
  void LayerNormForward(int rows, int dim, float eps, const float* x, const float* g, const float* b, float* y,
                        float* mean, float* rstd) override {
    Time("LayerNormForward", [&] { inner_->LayerNormForward(rows, dim, eps, x, g, b, y, mean, rstd); });
  }
  void LayerNormBackward(int rows, int dim, const float* dy, const float* x, const float* g, const float* mean,
                         const float* rstd, float* dx, float* dg, float* db) override {
    Time("LayerNormBackward", [&] { inner_->LayerNormBackward(rows, dim, dy, x, g, mean, rstd, dx, dg, db); });
  }
  void DropoutForward(size_t n, float p, const DropoutKey& key, uint32_t t, const float* x, float* y,
                      float* mask) override {
    Time("DropoutForward", [&] { inner_->DropoutForward(n, p, key, t, x, y, mask); });
  }
  void EmbeddingForward(size_t n, int dim, const float* table, const int32_t* ids, float scale, int len,
                        float* out) override {
    Time("EmbeddingForward", [&] { inner_->EmbeddingForward(n, dim, table, ids, scale, len, out); });
  }
  void EmbeddingBackward(size_t n, int dim, const float* dout, const int32_t* ids, float scale,
                         float* dtable) override {
    Time("EmbeddingBackward", [&] { inner_->EmbeddingBackward(n, dim, dout, ids, scale, dtable); });
  }
  void Fill(size_t n, float v, float* x) override {
    Time("Fill", [&] { inner_->Fill(n, v, x); });
  }
  void Copy(size_t n, const float* x, float* y) override {
    Time("Copy", [&] { inner_->Copy(n, x, y); });
  }
  void Add(size_t n, const float* x, const float* y, float* z) override {
    Time("Add", [&] { inner_->Add(n, x, y, z); });
  }
  void Accumulate(size_t n, const float* x, float* y) override {
    Time("Accumulate", [&] { inner_->Accumulate(n, x, y); });
  }
  void Multiply(size_t n, const float* x, const float* y, float* z) override {
    Time("Multiply", [&] { inner_->Multiply(n, x, y, z); });
  }
  void BiasAdd(int rows, int cols, const float* bias, float* x) override {
    Time("BiasAdd", [&] { inner_->BiasAdd(rows, cols, bias, x); });
  }
  void BiasBackward(int rows, int cols, const float* dy, float* db) override {
    Time("BiasBackward", [&] { inner_->BiasBackward(rows, cols, dy, db); });
  }
  void ReluForward(size_t n, const float* x, float* y) override {
    Time("ReluForward", [&] { inner_->ReluForward(n, x, y); });
  }
  void ReluBackward(size_t n, const float* y, const float* dy, float* dx) override {
    Time("ReluBackward", [&] { inner_->ReluBackward(n, y, dy, dx); });
  }
  double Sum(size_t n, const float* x) override {
    double s = 0;
    Time("Sum", [&] { s = inner_->Sum(n, x); });
    return s;
  }
  void CrossEntropy(int rows, int vocab, float eps, const float* logits, const int32_t* targets, int32_t pad,
                    float* loss, float* correct, float* dlogits) override {
    Time("CrossEntropy", [&] { inner_->CrossEntropy(rows, vocab, eps, logits, targets, pad, loss, correct, dlogits); });
  }

 private:
  template <typename F>
  void Time(const char* name, F&& call) {
    inner_->Synchronize();
    const auto start = std::chrono::steady_clock::now();
    call();
    inner_->Synchronize();
    Entry& e = entries_[name];
    ++e.calls;
    e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  Backend<float>* inner_;
  int vocab_;
  std::map<std::string, Entry> entries_;
};

}  // namespace psformer

#endif  // PSFORMER_BENCH_GPU_TIMED_BACKEND_H_
