#include "worker/backend/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "common/logging.h"

namespace psformer {
namespace {

// Below this many elements a loop runs on one thread: waking the others costs more.
constexpr int64_t kParallelMin = 1 << 15;
// Below this many multiply-adds a matrix product runs on one OpenBLAS thread.
constexpr double kGemmParallelFlops = 1 << 24;

int ResolveThreads(int threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

CBLAS_TRANSPOSE ToBlas(Transpose t) { return t == Transpose::kYes ? CblasTrans : CblasNoTrans; }

}  // namespace

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

std::string BlasLibraryDescription() {
  const char* config = openblas_get_config();
  std::string text = config != nullptr ? config : "OpenBLAS (it does not say which)";
  text.erase(text.find_last_not_of(' ') + 1);
  return text;
}

template <typename T>
CpuBackend<T>::CpuBackend(int threads) : threads_(ResolveThreads(threads)), pool_(threads_) {}

template <typename T>
template <typename F>
void CpuBackend<T>::For(int64_t n, int64_t work, F&& body) {
  if (work < kParallelMin || threads_ == 1) {
    body(int64_t{0}, n);
  } else {
    pool_.ParallelFor(n, body);
  }
}

template <typename T>
void CpuBackend<T>::SetBlasThreads(int threads) {
  if (threads != blas_threads_) {
    openblas_set_num_threads(threads);
    blas_threads_ = threads;
  }
}

template <typename T>
void* CpuBackend<T>::AllocateBytes(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  PSF_CHECK(p != nullptr && "out of host memory");
  std::memset(p, 0, rounded);
  return p;
}

template <typename T>
void CpuBackend<T>::FreeBytes(void* ptr) {
  std::free(ptr);
}

template <typename T>
void CpuBackend<T>::CopyToDevice(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes) std::memcpy(device_dst, host_src, bytes);
}

template <typename T>
void CpuBackend<T>::CopyToHost(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes) std::memcpy(host_dst, device_src, bytes);
}

template <typename T>
void CpuBackend<T>::Gemm(Transpose ta, Transpose tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
                         int ldb, T beta, T* c, int ldc) {
  if (m == 0 || n == 0) return;
  SetBlasThreads(static_cast<double>(m) * n * k >= kGemmParallelFlops ? threads_ : 1);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ToBlas(ta), ToBlas(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ToBlas(ta), ToBlas(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template <typename T>
void CpuBackend<T>::GemmStridedBatched(Transpose ta, Transpose tb, int m, int n, int k, T alpha, const T* a, int lda,
                                       int64_t stride_a, const T* b, int ldb, int64_t stride_b, T beta, T* c, int ldc,
                                       int64_t stride_c, int batch) {
  // Attention's matrices are small; OpenBLAS decides per call whether threads pay.
  for (int i = 0; i < batch; ++i) {
    Gemm(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
  }
}

template <typename T>
void CpuBackend<T>::MaskedSoftmaxForward(const AttentionShape& s, T scale, const T* scores, const int32_t* key_tokens,
                                         int32_t pad_id, bool causal, T* probs) {
  const int64_t rows = static_cast<int64_t>(s.batch) * s.heads * s.queries;
  const int keys = s.keys;
  For(rows, rows * keys, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (static_cast<int64_t>(s.heads) * s.queries);
      const int q = static_cast<int>(r % s.queries);
      const int32_t* tokens = key_tokens + b * keys;
      const T* in = scores + r * keys;
      T* out = probs + r * keys;
      const int limit = causal ? std::min(keys, q + 1) : keys;
      T max_value = -std::numeric_limits<T>::infinity();
      for (int j = 0; j < limit; ++j) {
        if (tokens[j] != pad_id) max_value = std::max(max_value, scale * in[j]);
      }
      if (max_value == -std::numeric_limits<T>::infinity()) {
        std::fill(out, out + keys, T(0));
        continue;
      }
      T total = 0;
      for (int j = 0; j < keys; ++j) {
        const T e = (j < limit && tokens[j] != pad_id) ? std::exp(scale * in[j] - max_value) : T(0);
        out[j] = e;
        total += e;
      }
      const T inv = T(1) / total;
      for (int j = 0; j < keys; ++j) out[j] *= inv;
    }
  });
}

template <typename T>
void CpuBackend<T>::SoftmaxBackward(const AttentionShape& s, T scale, const T* probs, const T* dprobs, T* dscores) {
  const int64_t rows = static_cast<int64_t>(s.batch) * s.heads * s.queries;
  const int keys = s.keys;
  For(rows, rows * keys, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* p = probs + r * keys;
      const T* dp = dprobs + r * keys;
      T* ds = dscores + r * keys;
      T dot = 0;
      for (int j = 0; j < keys; ++j) dot += p[j] * dp[j];
      for (int j = 0; j < keys; ++j) ds[j] = scale * p[j] * (dp[j] - dot);
    }
  });
}

// SplitHeads and MergeHeads are one copy in opposite directions: for each (sentence b, head h,
// position t), the head_dim values at columns column + h * head_dim of row b * len + t of a
// [batch * len, ld] matrix, and row (b * heads + h) * len + t of the head-major
// [batch * heads, len, head_dim] one. kToHeads: `from` is the matrix and `to` head-major.
template <typename T>
template <bool kToHeads>
void CpuBackend<T>::CopyHeads(const T* from, T* to, int ld, int column, int batch, int len, int heads, int head_dim) {
  const int64_t blocks = static_cast<int64_t>(batch) * heads;
  For(blocks, blocks * len * head_dim, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads;
      const int h = static_cast<int>(bh % heads);
      for (int t = 0; t < len; ++t) {
        const int64_t in_matrix = (b * len + t) * ld + column + h * head_dim;
        const int64_t in_heads = (bh * len + t) * head_dim;
        const T* src = from + (kToHeads ? in_matrix : in_heads);
        std::copy(src, src + head_dim, to + (kToHeads ? in_heads : in_matrix));
      }
    }
  });
}

template <typename T>
void CpuBackend<T>::SplitHeads(const T* x, int ld, int column, int batch, int len, int heads, int head_dim, T* out) {
  CopyHeads<true>(x, out, ld, column, batch, len, heads, head_dim);
}

template <typename T>
void CpuBackend<T>::MergeHeads(const T* x, int batch, int len, int heads, int head_dim, T* out, int ld, int column) {
  CopyHeads<false>(x, out, ld, column, batch, len, heads, head_dim);
}

template <typename T>
void CpuBackend<T>::LayerNormForward(int rows, int dim, T epsilon, const T* x, const T* gamma, const T* beta, T* y,
                                     T* mean, T* rstd) {
  For(rows, int64_t{rows} * dim, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + static_cast<int64_t>(r) * dim;
      T* yr = y + static_cast<int64_t>(r) * dim;
      T mu = 0;
      for (int i = 0; i < dim; ++i) mu += xr[i];
      mu /= dim;
      T var = 0;
      for (int i = 0; i < dim; ++i) var += (xr[i] - mu) * (xr[i] - mu);
      var /= dim;
      const T rs = T(1) / std::sqrt(var + epsilon);
      for (int i = 0; i < dim; ++i) yr[i] = gamma[i] * ((xr[i] - mu) * rs) + beta[i];
      mean[r] = mu;
      rstd[r] = rs;
    }
  });
}

template <typename T>
void CpuBackend<T>::LayerNormBackward(int rows, int dim, const T* dy, const T* x, const T* gamma, const T* mean,
                                      const T* rstd, T* dx, T* dgamma, T* dbeta) {
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
  For(rows, int64_t{rows} * dim, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = static_cast<int64_t>(r) * dim;
      const T mu = mean[r], rs = rstd[r];
      T sum_g = 0, sum_gx = 0;
      for (int i = 0; i < dim; ++i) {
        const T g = dy[o + i] * gamma[i];
        sum_g += g;
        sum_gx += g * (x[o + i] - mu) * rs;
      }
      sum_g /= dim;
      sum_gx /= dim;
      for (int i = 0; i < dim; ++i) {
        const T xhat = (x[o + i] - mu) * rs;
        dx[o + i] = rs * (dy[o + i] * gamma[i] - sum_g - xhat * sum_gx);
      }
    }
  });
  // Parameter gradients: each thread owns a column range and sums rows in order.
  For(dim, int64_t{rows} * dim, [&](int64_t begin, int64_t end) {
    for (int r = 0; r < rows; ++r) {
      const int64_t o = static_cast<int64_t>(r) * dim;
      const T mu = mean[r], rs = rstd[r];
      for (int i = begin; i < end; ++i) {
        dgamma[i] += dy[o + i] * ((x[o + i] - mu) * rs);
        dbeta[i] += dy[o + i];
      }
    }
  });
}

template <typename T>
void CpuBackend<T>::DropoutForward(size_t n, float p, const DropoutKey& key, uint32_t tensor, const T* x, T* y,
                                   T* mask) {
  if (p <= 0.0f) {
    std::fill(mask, mask + n, T(1));
    if (x != y) std::copy(x, x + n, y);
    return;
  }
  const T keep_scale = T(1) / (T(1) - static_cast<T>(p));
  const PhiloxKey pkey{{static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32)}};
  const int64_t groups = static_cast<int64_t>((n + 3) / 4);
  // One Philox call serves four consecutive elements (words 0..3), as DropoutKeep defines.
  For(groups, n, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const PhiloxCounter words =
          Philox4x32_10(PhiloxCounter{{static_cast<uint32_t>(g), tensor, key.step, key.worker}}, pkey);
      const size_t first = static_cast<size_t>(g) * 4;
      const size_t last = std::min(n, first + 4);
      for (size_t i = first; i < last; ++i) {
        const T m = PhiloxUniform(words.v[i - first]) >= p ? keep_scale : T(0);
        mask[i] = m;
        y[i] = x[i] * m;
      }
    }
  });
}

template <typename T>
const T* CpuBackend<T>::PositionalEncoding(int len, int dim) {
  if (len > pe_len_ || dim != pe_dim_) {
    pe_len_ = std::max(len, dim == pe_dim_ ? pe_len_ : 0);
    pe_dim_ = dim;
    pe_.assign(static_cast<size_t>(pe_len_) * dim, T(0));
    for (int pos = 0; pos < pe_len_; ++pos) {
      for (int i = 0; i < dim; ++i) {
        const double angle = pos / std::pow(10000.0, static_cast<double>(i - i % 2) / dim);
        pe_[static_cast<size_t>(pos) * dim + i] = static_cast<T>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    }
  }
  return pe_.data();
}

template <typename T>
void CpuBackend<T>::EmbeddingForward(size_t n, int dim, const T* table, const int32_t* ids, T scale, int len, T* out) {
  const T* pe = len > 0 ? PositionalEncoding(len, dim) : nullptr;
  For(static_cast<int64_t>(n), n * dim, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = table + static_cast<int64_t>(ids[i]) * dim;
      T* o = out + i * dim;
      if (pe != nullptr) {
        const T* pr = pe + (i % len) * dim;
        for (int c = 0; c < dim; ++c) o[c] = scale * row[c] + pr[c];
      } else {
        for (int c = 0; c < dim; ++c) o[c] = scale * row[c];
      }
    }
  });
}

template <typename T>
void CpuBackend<T>::EmbeddingBackward(size_t n, int dim, const T* dout, const int32_t* ids, T scale, T* dtable) {
  // Tokens repeat, so rows collide: each thread owns a column range and walks tokens in order.
  For(dim, n * dim, [&](int64_t begin, int64_t end) {
    for (size_t i = 0; i < n; ++i) {
      T* row = dtable + static_cast<int64_t>(ids[i]) * dim;
      const T* d = dout + i * dim;
      for (int c = begin; c < end; ++c) row[c] += scale * d[c];
    }
  });
}

// An elementwise loop over i in [0, n), parallel when n is large enough.
#define PSF_FOR_EACH_ELEMENT(n, statement)                          \
  For(static_cast<int64_t>(n), n, [&](int64_t begin, int64_t end) { \
    for (int64_t i = begin; i < end; ++i) statement;                \
  })

template <typename T>
void CpuBackend<T>::Fill(size_t n, T value, T* x) {
  PSF_FOR_EACH_ELEMENT(n, x[i] = value);
}
template <typename T>
void CpuBackend<T>::Copy(size_t n, const T* x, T* y) {
  PSF_FOR_EACH_ELEMENT(n, y[i] = x[i]);
}
template <typename T>
void CpuBackend<T>::Add(size_t n, const T* x, const T* y, T* z) {
  PSF_FOR_EACH_ELEMENT(n, z[i] = x[i] + y[i]);
}
template <typename T>
void CpuBackend<T>::Accumulate(size_t n, const T* x, T* y) {
  PSF_FOR_EACH_ELEMENT(n, y[i] += x[i]);
}
template <typename T>
void CpuBackend<T>::Multiply(size_t n, const T* x, const T* y, T* z) {
  PSF_FOR_EACH_ELEMENT(n, z[i] = x[i] * y[i]);
}
template <typename T>
void CpuBackend<T>::ReluForward(size_t n, const T* x, T* y) {
  PSF_FOR_EACH_ELEMENT(n, y[i] = x[i] > T(0) ? x[i] : T(0));
}
template <typename T>
void CpuBackend<T>::ReluBackward(size_t n, const T* y, const T* dy, T* dx) {
  PSF_FOR_EACH_ELEMENT(n, dx[i] = y[i] > T(0) ? dy[i] : T(0));
}
#undef PSF_FOR_EACH_ELEMENT

template <typename T>
void CpuBackend<T>::BiasAdd(int rows, int cols, const T* bias, T* x) {
  For(rows, int64_t{rows} * cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* xr = x + static_cast<int64_t>(r) * cols;
      for (int c = 0; c < cols; ++c) xr[c] += bias[c];
    }
  });
}

template <typename T>
void CpuBackend<T>::BiasBackward(int rows, int cols, const T* dy, T* dbias) {
  For(cols, int64_t{rows} * cols, [&](int64_t begin, int64_t end) {
    for (int r = 0; r < rows; ++r) {
      const T* d = dy + static_cast<int64_t>(r) * cols;
      for (int c = begin; c < end; ++c) dbias[c] += d[c];
    }
  });
}

template <typename T>
double CpuBackend<T>::Sum(size_t n, const T* x) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]);
  return total;
}

template <typename T>
void CpuBackend<T>::CrossEntropy(int rows, int vocab, T epsilon, const T* logits, const int32_t* targets,
                                 int32_t pad_id, T* loss, T* correct, T* dlogits) {
  For(rows, int64_t{rows} * vocab, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = logits + static_cast<int64_t>(r) * vocab;
      T* dx = dlogits != nullptr ? dlogits + static_cast<int64_t>(r) * vocab : nullptr;
      const int32_t target = targets[r];
      if (target == pad_id) {
        loss[r] = 0;
        correct[r] = 0;
        if (dx != nullptr) std::fill(dx, dx + vocab, T(0));
        continue;
      }
      int best = 0;
      T sum_x = 0;
      for (int v = 0; v < vocab; ++v) {
        if (x[v] > x[best]) best = v;
        sum_x += x[v];
      }
      const T max_value = x[best];
      T z = 0;
      for (int v = 0; v < vocab; ++v) z += std::exp(x[v] - max_value);
      const T log_z = max_value + std::log(z);
      // -log p[v] = log_z - x[v]; its mean over v is log_z - mean(x).
      loss[r] = (T(1) - epsilon) * (log_z - x[target]) + epsilon * (log_z - sum_x / vocab);
      correct[r] = best == target ? T(1) : T(0);
      if (dx != nullptr) {
        const T smooth = epsilon / vocab;
        const T target_x = x[target];
        for (int v = 0; v < vocab; ++v) dx[v] = std::exp(x[v] - log_z) - smooth;
        dx[target] = std::exp(target_x - log_z) - smooth - (T(1) - epsilon);
      }
    }
  });
}

template class CpuBackend<float>;
template class CpuBackend<double>;

}  // namespace psformer
