// The matrix products of one training step's forward + backward, as the CPU backend makes them:
// each distinct cblas_sgemm call (transposes, m, n, k, leading dimensions, alpha, beta) and how
// many times the step makes it. bench/blas_libraries_bench times these shapes under each BLAS
// library (bench/RESULTS.md, "BLAS libraries").
//   build/psformer_gemm_shapes CONFIG LENGTH [LAYERS] [VOCAB]
// The model is CONFIG's (LAYERS a side when given, VOCAB when the config takes it from the data);
// the batch is one worker's share of the step's token budget (batching.*_tokens_per_step divided
// by cluster.workers) in full sentences of LENGTH tokens a side, as psformer_model_bench builds.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/config_loader.h"
#include "common/param_init.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

struct GemmShape {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc;
  float alpha, beta;
  auto Key() const { return std::tie(ta, tb, m, n, k, lda, ldb, ldc, alpha, beta); }
  bool operator<(const GemmShape& other) const { return Key() < other.Key(); }
};

// The CPU backend, noting every matrix product it makes (GemmStridedBatched and GemmBias reach
// Gemm too) before making it.
class GemmRecorder : public CpuBackend<float> {
 public:
  explicit GemmRecorder(int threads) : CpuBackend<float>(threads) {}

  void Gemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
            int ldb, float beta, float* c, int ldc) override {
    if (recording_ && m > 0 && n > 0) {
      const GemmShape shape{ta == Transpose::kYes, tb == Transpose::kYes, m, n, k, lda, ldb, ldc, alpha, beta};
      if (counts_[shape]++ == 0) order_.push_back(shape);
    }
    CpuBackend<float>::Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  void set_recording(bool on) { recording_ = on; }
  const std::vector<GemmShape>& order() const { return order_; }  // first call first
  int count(const GemmShape& shape) const { return counts_.at(shape); }

 private:
  bool recording_ = false;
  std::map<GemmShape, int> counts_;
  std::vector<GemmShape> order_;
};

int Run(const std::string& config_path, int length, int layers, int vocab) {
  auto config = ResolveConfig(config_path, {});
  if (!config.ok()) {
    std::fprintf(stderr, "psformer_gemm_shapes: %s\n", config.status().message().c_str());
    return 2;
  }
  proto::ModelConfig model_config = config->model();
  if (layers > 0) model_config.set_layers(layers);
  if (vocab <= 0) vocab = ResolvedVocabSize(*config);
  if (vocab <= kNumReservedIds) {
    std::fprintf(stderr, "psformer_gemm_shapes: %s takes its vocabulary from the data: give VOCAB\n",
                 config_path.c_str());
    return 2;
  }
  const int workers = config->cluster().workers();
  const int64_t budget = std::min(config->batching().src_tokens_per_step(), config->batching().tgt_tokens_per_step());
  const int sentences = static_cast<int>((budget + workers - 1) / workers / length);
  if (sentences < 1 || length > model_config.max_positions()) {
    std::fprintf(stderr, "psformer_gemm_shapes: no batch of length %d fits\n", length);
    return 2;
  }

  Batch batch;
  batch.sentences = sentences;
  batch.src_len = batch.tgt_len = length;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> token(kNumReservedIds, vocab - 1);
  for (int s = 0; s < sentences; ++s) {
    for (int i = 0; i < length; ++i) {
      batch.src.push_back(i == length - 1 ? kEosId : token(rng));
      const int y = i == length - 1 ? kEosId : token(rng);
      batch.tgt_in.push_back(i == 0 ? kBosId : batch.tgt_out.back());
      batch.tgt_out.push_back(y);
    }
  }
  batch.src_tokens = batch.tgt_tokens = static_cast<int64_t>(sentences) * length;

  GemmRecorder backend(1);
  Transformer<float> model(model_config, vocab, &backend);
  std::vector<float> host(model.parameter_count());
  InitParamRange(model.layout(), 1, 0, host.size(), host.data());
  auto params = backend.Allocate<float>(host.size());
  params.Upload(host.data(), host.size());
  auto grad = backend.Allocate<float>(host.size());
  backend.set_recording(true);
  model.ForwardBackward(params.data(), batch, DropoutKey{1, 1, 0}, grad.data());

  std::printf("# %s: layers %d, d_model %d, d_ff %d, heads %d, vocab %d, %s; batch %d x (%d + %d) tokens\n",
              config_path.c_str(), model_config.layers(), model_config.d_model(), model_config.d_ff(),
              model_config.heads(), vocab,
              model_config.norm_position() == proto::ModelConfig::PRE_LN ? "PRE_LN" : "POST_LN", sentences, length,
              length);
  std::printf("# count transa transb m n k lda ldb ldc alpha beta (row-major)\n");
  for (const GemmShape& s : backend.order()) {
    std::printf("%d %c %c %d %d %d %d %d %d %.9g %.9g\n", backend.count(s), s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m,
                s.n, s.k, s.lda, s.ldb, s.ldc, s.alpha, s.beta);
  }
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: psformer_gemm_shapes CONFIG LENGTH [LAYERS] [VOCAB]\n");
    return 2;
  }
  return psformer::Run(argv[1], std::atoi(argv[2]), argc > 3 ? std::atoi(argv[3]) : 0,
                       argc > 4 ? std::atoi(argv[4]) : 0);
}
