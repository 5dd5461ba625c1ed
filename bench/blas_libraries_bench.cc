// Single-precision matrix products of one training step (the shapes psformer_gemm_shapes lists)
// timed under one BLAS library, loaded at run time so that one binary compares them all, each in
// a process of its own (OpenBLAS picks its kernels when it loads; two libraries' thread pools in
// one process would compete). Run by bench/blas_libraries_bench.sh; results in bench/RESULTS.md
// ("BLAS libraries").
//   blas_libraries_bench time KIND LIBRARY SHAPES THREADS SECONDS SAMPLES
//     KIND: openblas | blis | mkl (their cblas_sgemm) or dnnl (oneDNN's dnnl_sgemm); LIBRARY: the
//     shared library's path. Each shape runs as CpuBackend::Gemm runs it: on THREADS threads when
//     it has at least 2^24 multiply-adds, else on one. Prints a line per shape (median time of
//     its calls, made for at least SECONDS and 3 calls or, for the slowest, 2 calls and 3 seconds,
//     after one untimed call) and the step's total (each shape's median times how often the step
//     makes it). Checks the untimed call's result at 2,048 sampled entries against a
//     double-precision sum and writes them to SAMPLES.
//   blas_libraries_bench compare SAMPLES...
//     The largest difference between the first SAMPLES file and each other, per entry, relative
//     to sum_k |alpha a_ik b_kj| + |beta c_ij| (the scale of the entry's rounding error).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

// As worker/backend/cpu_backend.cc's kGemmParallelFlops: smaller products run on one thread.
constexpr double kGemmParallelFlops = 1 << 24;
constexpr int kSamplesPerShape = 2048;

struct Shape {
  int count;
  char ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  double multiply_adds() const { return static_cast<double>(m) * n * k; }
  int64_t a_size() const { return (ta == 'T' ? k : m) * lda; }
  int64_t b_size() const { return (tb == 'T' ? n : k) * ldb; }
  int64_t c_size() const { return m * ldc; }
};

std::vector<Shape> ReadShapes(const std::string& path) {
  std::ifstream in(path);
  std::vector<Shape> shapes;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Shape s;
    fields >> s.count >> s.ta >> s.tb >> s.m >> s.n >> s.k >> s.lda >> s.ldb >> s.ldc >> s.alpha >> s.beta;
    if (!fields) {
      std::fprintf(stderr, "blas_libraries_bench: %s: cannot read \"%s\"\n", path.c_str(), line.c_str());
      std::exit(2);
    }
    shapes.push_back(s);
  }
  return shapes;
}

// The C interfaces (row-major, as psformer calls them), by their ABI: CBLAS's enumerations
// are ints (CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112); oneDNN's dnnl_dim_t is int64_t.
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
using SetThreads = void (*)(int);

// One library: its sgemm, how to set its threads, what it calls its kernels.
class Library {
 public:
  Library(const std::string& kind, const std::string& path) : kind_(kind) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) Fail(dlerror());
    const char* set_threads = kind == "openblas" ? "openblas_set_num_threads"
                              : kind == "blis"   ? "bli_thread_set_num_threads"
                              : kind == "mkl"    ? "MKL_Set_Num_Threads"
                              : kind == "dnnl"   ? "omp_set_num_threads"  // oneDNN runs on OpenMP
                                                 : nullptr;
    if (set_threads == nullptr) Fail("unknown KIND " + kind);
    set_threads_ = reinterpret_cast<SetThreads>(Find(set_threads));
    if (kind == "dnnl") {
      dnnl_sgemm_ = reinterpret_cast<DnnlSgemm>(Find("dnnl_sgemm"));
    } else {
      cblas_sgemm_ = reinterpret_cast<CblasSgemm>(Find("cblas_sgemm"));
    }
  }

  // "Zen" (OpenBLAS), "zen3" (BLIS), "" where the library does not say.
  std::string Kernels() const {
    if (kind_ == "openblas") return reinterpret_cast<const char* (*)()>(Find("openblas_get_corename"))();
    if (kind_ == "blis") {
      const int arch = reinterpret_cast<int (*)()>(Find("bli_arch_query_id"))();
      return reinterpret_cast<const char* (*)(int)>(Find("bli_arch_string"))(arch);
    }
    return "";
  }

  void set_threads(int threads) const { set_threads_(threads); }

  void Sgemm(const Shape& s, const float* a, const float* b, float* c) const {
    if (dnnl_sgemm_ != nullptr) {
      const int status = dnnl_sgemm_(s.ta, s.tb, s.m, s.n, s.k, s.alpha, a, s.lda, b, s.ldb, s.beta, c, s.ldc);
      if (status != 0) Fail("dnnl_sgemm returned " + std::to_string(status));
    } else {
      cblas_sgemm_(101, s.ta == 'T' ? 112 : 111, s.tb == 'T' ? 112 : 111, static_cast<int>(s.m), static_cast<int>(s.n),
                   static_cast<int>(s.k), s.alpha, a, static_cast<int>(s.lda), b, static_cast<int>(s.ldb), s.beta, c,
                   static_cast<int>(s.ldc));
    }
  }

 private:
  void* Find(const char* symbol) const {
    void* address = dlsym(handle_, symbol);  // searches the library's dependencies too (libgomp)
    if (address == nullptr) Fail(std::string("no symbol ") + symbol);
    return address;
  }
  [[noreturn]] static void Fail(const std::string& why) {
    std::fprintf(stderr, "blas_libraries_bench: %s\n", why.c_str());
    std::exit(2);
  }

  std::string kind_;
  void* handle_ = nullptr;
  SetThreads set_threads_ = nullptr;
  CblasSgemm cblas_sgemm_ = nullptr;
  DnnlSgemm dnnl_sgemm_ = nullptr;
};

std::vector<float> Uniform(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

float At(const float* x, char trans, int64_t ld, int64_t row, int64_t col) {
  return trans == 'T' ? x[col * ld + row] : x[row * ld + col];
}

// One sampled entry of C: the library's value and the scale of its rounding error.
struct Sample {
  float value, scale;
};

int Time(const std::string& kind, const std::string& path, const std::string& shapes_path, int threads, double seconds,
         const std::string& samples_path) {
  const Library library(kind, path);
  const std::vector<Shape> shapes = ReadShapes(shapes_path);
  std::vector<Sample> samples;
  double step_seconds = 0, worst_error = 0;
  using Clock = std::chrono::steady_clock;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    std::mt19937 rng(static_cast<uint32_t>(i + 1));  // the same operands in every process
    const std::vector<float> a = Uniform(s.a_size(), rng), b = Uniform(s.b_size(), rng), c0 = Uniform(s.c_size(), rng);
    std::vector<float> c = c0;
    const int shape_threads = s.multiply_adds() >= kGemmParallelFlops ? threads : 1;
    library.set_threads(shape_threads);
    library.Sgemm(s, a.data(), b.data(), c.data());

    double shape_error = 0;
    std::uniform_int_distribution<int64_t> row(0, s.m - 1), col(0, s.n - 1);
    for (int j = 0; j < kSamplesPerShape; ++j) {
      const int64_t r = row(rng), q = col(rng);
      double exact = s.beta * static_cast<double>(c0[r * s.ldc + q]), scale = std::fabs(exact);
      for (int64_t p = 0; p < s.k; ++p) {
        const double term =
            static_cast<double>(s.alpha) * At(a.data(), s.ta, s.lda, r, p) * At(b.data(), s.tb, s.ldb, p, q);
        exact += term;
        scale += std::fabs(term);
      }
      const float value = c[r * s.ldc + q];
      samples.push_back({value, static_cast<float>(scale)});
      shape_error = std::max(shape_error, std::fabs(value - exact) / std::max(scale, 1e-30));
    }
    worst_error = std::max(worst_error, shape_error);

    // At least SECONDS and 3 calls; products of seconds each (the base model's output projection)
    // stop after 2 calls and 3 seconds.
    std::vector<double> times;
    const auto start = Clock::now();
    for (double elapsed = 0; times.size() < 3 || elapsed < seconds;) {
      if (times.size() >= 2 && elapsed >= 3) break;
      const auto t0 = Clock::now();
      library.Sgemm(s, a.data(), b.data(), c.data());
      const auto t1 = Clock::now();
      times.push_back(std::chrono::duration<double>(t1 - t0).count());
      elapsed = std::chrono::duration<double>(t1 - start).count();
    }
    const auto middle = times.begin() + (times.size() - 1) / 2;  // the lower middle of an even count
    std::nth_element(times.begin(), middle, times.end());
    const double median = *middle;
    step_seconds += s.count * median;
    std::printf("shape %d %c%c m=%lld n=%lld k=%lld beta=%g threads=%d: %.1f us, %.1f GFLOP/s, error %.2g\n", s.count,
                s.ta, s.tb, static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                s.beta, shape_threads, median * 1e6, 2 * s.multiply_adds() / median / 1e9, shape_error);
  }
  std::ofstream out(samples_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(samples.data()),
            static_cast<std::streamsize>(samples.size() * sizeof(Sample)));
  if (!out) {
    std::fprintf(stderr, "blas_libraries_bench: cannot write %s\n", samples_path.c_str());
    return 2;
  }
  const std::string kernels = library.Kernels();
  std::printf("total %.2f ms, largest error %.2g, kernels %s\n", step_seconds * 1e3, worst_error,
              kernels.empty() ? "-" : kernels.c_str());
  return 0;
}

std::vector<Sample> ReadSamples(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<Sample> samples(static_cast<size_t>(in.tellg()) / sizeof(Sample));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(samples.data()), static_cast<std::streamsize>(samples.size() * sizeof(Sample)));
  return samples;
}

int Compare(const std::vector<std::string>& paths) {
  const std::vector<Sample> first = ReadSamples(paths[0]);
  for (size_t f = 1; f < paths.size(); ++f) {
    const std::vector<Sample> other = ReadSamples(paths[f]);
    if (other.size() != first.size() || first.empty()) {
      std::fprintf(stderr, "blas_libraries_bench: %s and %s hold different shapes\n", paths[0].c_str(),
                   paths[f].c_str());
      return 2;
    }
    double largest = 0;
    for (size_t i = 0; i < first.size(); ++i) {
      largest = std::max(largest, std::fabs(static_cast<double>(other[i].value) - first[i].value) /
                                      std::max<double>(first[i].scale, 1e-30));
    }
    std::printf("%s %.2g\n", paths[f].c_str(), largest);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "time" && argc == 8) {
    return Time(argv[2], argv[3], argv[4], std::atoi(argv[5]), std::atof(argv[6]), argv[7]);
  }
  if (mode == "compare" && argc >= 4) return Compare(std::vector<std::string>(argv + 2, argv + argc));
  std::fprintf(stderr,
               "usage: blas_libraries_bench time KIND LIBRARY SHAPES THREADS SECONDS SAMPLES\n"
               "       blas_libraries_bench compare SAMPLES...\n");
  return 2;
}
