// Forward + backward throughput of the Transformer on the CPU backend, in target tokens per
// second (and source + target tokens per second). Run by hand; results go to bench/RESULTS.md.
//   build/psformer_model_bench [seconds per case (default 5)] [only the cases whose name has this]
// It computes with the OpenBLAS kernels the library chose or OPENBLAS_CORETYPE forced (it does not
// re-run itself as psformer does: worker/backend/blas_kernel_choice.h); the last column names them.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/param_init.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

struct Case {
  std::string name;
  int layers, d_model, d_ff, heads, vocab;
  int sentences, src_len, tgt_len;
  bool pre_ln = false;
};

// Full-length sentences: the batch is exactly sentences x len tokens on each side.
Batch FullBatch(const Case& c, std::mt19937& rng) {
  Batch b;
  b.sentences = c.sentences;
  b.src_len = c.src_len;
  b.tgt_len = c.tgt_len;
  std::uniform_int_distribution<int> token(kNumReservedIds, c.vocab - 1);
  for (int s = 0; s < c.sentences; ++s) {
    for (int i = 0; i < c.src_len; ++i) b.src.push_back(i == c.src_len - 1 ? kEosId : token(rng));
    for (int i = 0; i < c.tgt_len; ++i) {
      const int y = i == c.tgt_len - 1 ? kEosId : token(rng);
      b.tgt_in.push_back(i == 0 ? kBosId : b.tgt_out.back());
      b.tgt_out.push_back(y);
    }
  }
  b.src_tokens = static_cast<int64_t>(c.sentences) * c.src_len;
  b.tgt_tokens = static_cast<int64_t>(c.sentences) * c.tgt_len;
  return b;
}

void Run(const Case& c, int threads, double seconds) {
  proto::ModelConfig m;
  m.set_layers(c.layers);
  m.set_d_model(c.d_model);
  m.set_d_ff(c.d_ff);
  m.set_heads(c.heads);
  m.set_dropout(0.1f);
  m.set_label_smoothing(0.1f);
  m.set_max_positions(1024);
  if (c.pre_ln) m.set_norm_position(proto::ModelConfig::PRE_LN);
  CpuBackend<float> be(threads);
  Transformer<float> model(m, c.vocab, &be);
  std::vector<float> host(model.parameter_count());
  InitParamRange(model.layout(), 1, 0, host.size(), host.data());
  auto params = be.Allocate<float>(host.size());
  params.Upload(host.data(), host.size());
  auto grad = be.Allocate<float>(host.size());
  std::mt19937 rng(1);
  const Batch batch = FullBatch(c, rng);
  model.ForwardBackward(params.data(), batch, DropoutKey{1, 1, 0}, grad.data());  // warm-up: allocations
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int steps = 0;
  double elapsed = 0;
  while (elapsed < seconds || steps < 3) {
    model.ForwardBackward(params.data(), batch, DropoutKey{1, static_cast<uint32_t>(steps + 2), 0}, grad.data());
    ++steps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const double per_step = elapsed / steps;
  std::printf("| %s | %llu | %d x (%d + %d) | %d | %.1f ms | %.0f | %.0f | %s |\n", c.name.c_str(),
              static_cast<unsigned long long>(model.parameter_count()), c.sentences, c.src_len, c.tgt_len, threads,
              per_step * 1e3, batch.tgt_tokens / per_step, (batch.src_tokens + batch.tgt_tokens) / per_step,
              BlasCoreName().c_str());
  std::fflush(stdout);
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 5.0;
  const std::string only = argc > 2 ? argv[2] : "";
  using psformer::Case;
  const std::vector<Case> cases = {
      // configs/copy.pbtxt's model and about its step's batch (1,024 padded tokens a side).
      {"copy (N=2, d=64, d_ff=128, h=4, V=16)", 2, 64, 128, 4, 16, 93, 11, 11},
      // One encoder and one decoder layer of the base model, ~2k tokens a side.
      {"base layer (N=1, d=512, d_ff=2048, h=8, V=1000)", 1, 512, 2048, 8, 1000, 64, 32, 32},
      // The same with the paper's vocabulary size: the output projection dominates.
      {"base layer (N=1, d=512, d_ff=2048, h=8, V=37000)", 1, 512, 2048, 8, 37000, 64, 32, 32},
      // configs/bible.pbtxt's model (the demo's, PRE_LN) and about its step's batch (<= 1,200
      // padded tokens a side).
      {"bible demo (N=2, d=256, d_ff=1024, h=4, V=4000, PRE_LN)", 2, 256, 1024, 4, 4000, 40, 30, 30, true},
  };
  std::printf(
      "| model | parameters | batch (sentences x (src + tgt len)) | threads | step | tgt tokens/s | "
      "src+tgt tokens/s | OpenBLAS kernels |\n|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    if (c.name.find(only) == std::string::npos) continue;
    for (int threads : {1, 2}) psformer::Run(c, threads, seconds);
  }
  return 0;
}
