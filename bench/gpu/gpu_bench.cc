// Times forward + backward of the Transformer base model (docs/paper.md: d_model 512, 6+6 layers,
// 8 heads, d_ff 2048, shared vocabulary of 37000) on one GPU with the CUDA backend, on a batch of
// about 25k source and 25k target tokens, and prints one line: tokens per second, step time,
// achieved TFLOPS and MFU (FLOPs counted from the shapes, see ModelFlops), and peak device
// memory. bench/gpu/pytorch_transformer.py prints the same line for PyTorch.
//
// Usage: psformer_gpu_bench [--math fp32|tf32|bf16] [--sentences N] [--len L] [--steps N]
//                           [--warmup N] [--vocab V] [--device D] [--peak-tflops X] [--profile 1]
//                           [--fused-epilogues 0|1] [--config FILE --corpus DIR]
//                           [--step-times FILE] [--upload 1] [--split-blocks B [--block-align A]]
// --config FILE --corpus DIR: instead of one synthetic batch, the batches a job of that config
// trains on a prepared corpus (worker 0 of 1, steps 1 .. warmup + steps, the model and vocabulary
// of the config and corpus): the bare GPU step of exactly what `psformer train` computes, with
// no servers, for bench/gpu/train_on_gpu.sh to set beside a real job's step. The line then also
// gives the batches' mean shape.
// --step-times FILE writes each step's time there, one line a step ("STEP MS SENTENCES SRC_LEN
// TGT_LEN TGT_TOKENS", warmup steps included, numbered as the job numbers them), to set beside a
// traced step of a job. --upload 1 times, inside each step, the upload of every parameter from
// pinned host memory before forward, as a job's step has it (there overlapped with forward).
// --split-blocks B times the step of cluster.split_embedding instead: the lookups' part of the
// embedding's gradient kept apart (LookupRows) and dE made in B blocks of rows, each beginning on
// a row aligned to up to A rows (--block-align, default 64; 1 gives the unaligned blocks of
// before, whose products cuBLAS could not run on its 16-byte-aligned tensor-core kernels).
// --profile 1 times every backend operation of the last step (timed_backend.h) and prints the
// split; the step time it reports then includes a synchronisation per operation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/gpu/timed_backend.h"
#include "common/config_loader.h"
#include "common/status.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/data/batch.h"
#include "worker/data/batch_source.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

struct BenchOptions {
  GemmMath math = GemmMath::kBf16;
  int sentences = 390;  // x len 64 = 24,960 source and 24,960 target tokens
  int len = 64;
  int steps = 10;
  int warmup = 3;
  int vocab = 37000;
  int device = 0;
  double peak_tflops = 0;  // 0 = from the device name (dense tensor-core peak of the math mode)
  bool profile = false;
  bool fused_epilogues = true;  // CudaBackendOptions::fused_epilogues
  std::string config;           // with corpus: the job's config file
  std::string corpus;           // a prepared corpus (psformer prepare --out): its batches, not a synthetic one
  std::string step_times;       // a file for each step's time, or empty
  bool upload = false;          // each step uploads the parameters first
  int split_blocks = 0;         // > 0: the split embedding's step, dE in this many blocks
  int block_align = 64;         // (OutputProjectionBlocks' max_align)
};

StatusOr<int> ParseInt(const std::string& flag, const char* text, int min) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min || v > 1000000000) {
    return Status::InvalidArgument(flag + " wants an integer >= " + std::to_string(min) + ", got '" + text + "'");
  }
  return static_cast<int>(v);
}

StatusOr<BenchOptions> ParseArgs(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Status::InvalidArgument("missing value after " + flag);
    const char* value = argv[++i];
    if (flag == "--math") {
      const std::string m = value;
      if (m == "fp32")
        o.math = GemmMath::kFp32;
      else if (m == "tf32")
        o.math = GemmMath::kTf32;
      else if (m == "bf16")
        o.math = GemmMath::kBf16;
      else
        return Status::InvalidArgument("--math wants fp32, tf32 or bf16, got '" + m + "'");
    } else if (flag == "--sentences") {
      PSF_ASSIGN_OR_RETURN(o.sentences, ParseInt(flag, value, 1));
    } else if (flag == "--len") {
      PSF_ASSIGN_OR_RETURN(o.len, ParseInt(flag, value, 2));
    } else if (flag == "--steps") {
      PSF_ASSIGN_OR_RETURN(o.steps, ParseInt(flag, value, 1));
    } else if (flag == "--warmup") {
      PSF_ASSIGN_OR_RETURN(o.warmup, ParseInt(flag, value, 0));
    } else if (flag == "--vocab") {
      PSF_ASSIGN_OR_RETURN(o.vocab, ParseInt(flag, value, kNumReservedIds + 1));
    } else if (flag == "--device") {
      PSF_ASSIGN_OR_RETURN(o.device, ParseInt(flag, value, 0));
    } else if (flag == "--peak-tflops") {
      PSF_ASSIGN_OR_RETURN(const int peak, ParseInt(flag, value, 1));
      o.peak_tflops = peak;
    } else if (flag == "--fused-epilogues") {
      PSF_ASSIGN_OR_RETURN(const int on, ParseInt(flag, value, 0));
      o.fused_epilogues = on != 0;
    } else if (flag == "--profile") {
      PSF_ASSIGN_OR_RETURN(const int on, ParseInt(flag, value, 0));
      o.profile = on != 0;
    } else if (flag == "--config") {
      o.config = value;
    } else if (flag == "--corpus") {
      o.corpus = value;
    } else if (flag == "--step-times") {
      o.step_times = value;
    } else if (flag == "--upload") {
      PSF_ASSIGN_OR_RETURN(const int on, ParseInt(flag, value, 0));
      o.upload = on != 0;
    } else if (flag == "--split-blocks") {
      PSF_ASSIGN_OR_RETURN(o.split_blocks, ParseInt(flag, value, 1));
    } else if (flag == "--block-align") {
      PSF_ASSIGN_OR_RETURN(o.block_align, ParseInt(flag, value, 1));
    } else {
      return Status::InvalidArgument("unknown flag '" + flag + "'");
    }
  }
  if (o.config.empty() != o.corpus.empty()) return Status::InvalidArgument("--config and --corpus go together");
  return o;
}

// The batches of steps 1 .. count of the job `config_path` on `corpus` (worker 0 of 1), and its
// model config and vocabulary.
struct JobBatches {
  proto::ModelConfig model;
  int vocab = 0;
  std::vector<Batch> batches;
};
StatusOr<JobBatches> LoadJobBatches(const std::string& config_path, const std::string& corpus, int count) {
  PSF_ASSIGN_OR_RETURN(proto::JobConfig config, ResolveConfig(config_path, {"data.train_dir=" + corpus}));
  PSF_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> source, MakeBatchSource(config));
  JobBatches job;
  job.model = config.model();
  job.vocab = source->vocab_size();
  for (int step = 1; step <= count; ++step) job.batches.push_back(source->TrainBatch(step, 0, 1));
  return job;
}

// Dense peak TFLOPS of the GPU for the math mode (vendor data sheets, no sparsity); 0 = unknown.
double PeakTflops(const std::string& name, GemmMath math) {
  const int index = math == GemmMath::kBf16 ? 0 : math == GemmMath::kTf32 ? 1 : 2;
  struct Gpu {
    const char* key;
    double peak[3];
  };
  static const Gpu kGpus[] = {
      {"H100 PCIe", {756, 378, 51}}, {"H100", {989, 495, 67}}, {"H200", {989, 495, 67}}, {"A100", {312, 156, 19.5}}};
  for (const Gpu& g : kGpus) {
    if (name.find(g.key) != std::string::npos) return g.peak[index];
  }
  return 0;
}

// FLOPs of one forward + backward (3x the forward's multiply-adds x 2), counting matrix products
// only: projections, feed-forward, attention scores and weighted sums, and the vocabulary
// projection. Element-wise work and the softmax are left out, as MFU conventions do.
double ModelFlops(const proto::ModelConfig& m, int vocab, double batch, double s, double t) {
  const double d = m.d_model(), f = m.d_ff(), layers = m.layers();
  const double src = batch * s, tgt = batch * t;
  const double encoder = layers * (src * (4 * d * d + 2 * d * f) + 2 * batch * s * s * d);
  const double decoder = layers * (tgt * (4 * d * d + 2 * d * d + 2 * d * f) + src * 2 * d * d + 2 * batch * t * t * d +
                                   2 * batch * t * s * d);
  const double logits = tgt * d * vocab;
  return 3 * 2 * (encoder + decoder + logits);
}

Batch FullBatch(int sentences, int len, int vocab) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int32_t> token(kNumReservedIds, vocab - 1);
  Batch b;
  b.sentences = sentences;
  b.src_len = b.tgt_len = len;
  const size_t n = static_cast<size_t>(sentences) * len;
  b.src.resize(n);
  b.tgt_in.resize(n);
  b.tgt_out.resize(n);
  for (int s = 0; s < sentences; ++s) {
    for (int i = 0; i < len; ++i) {
      const size_t at = static_cast<size_t>(s) * len + i;
      b.src[at] = i == len - 1 ? kEosId : token(rng);
      b.tgt_out[at] = i == len - 1 ? kEosId : token(rng);
      b.tgt_in[at] = i == 0 ? kBosId : b.tgt_out[at - 1];
    }
  }
  b.src_tokens = b.tgt_tokens = static_cast<int64_t>(n);
  return b;
}

int Run(const BenchOptions& o) {
  CudaBackendOptions bo;
  bo.device = o.device;
  bo.gemm_math = o.math;
  bo.fused_epilogues = o.fused_epilogues;
  auto created = CudaBackend::Create(bo);
  if (!created.ok()) {
    std::fprintf(stderr, "psformer_gpu_bench: %s\n", created.status().ToString().c_str());
    return 1;
  }
  CudaBackend& be = *created.value();
  proto::ModelConfig config;  // the defaults are the base model
  config.set_max_positions(std::max(o.len, 64));
  std::vector<Batch> batches;
  int vocab = o.vocab;
  if (!o.corpus.empty()) {
    auto job = LoadJobBatches(o.config, o.corpus, o.warmup + o.steps);
    if (!job.ok()) {
      std::fprintf(stderr, "psformer_gpu_bench: %s\n", job.status().ToString().c_str());
      return 1;
    }
    config = job->model;
    vocab = job->vocab;
    batches = std::move(job->batches);
  }
  TimedBackend timed(&be, vocab);
  Backend<float>* model_backend = o.profile ? static_cast<Backend<float>*>(&timed) : &be;
  Transformer<float> model(config, vocab, model_backend);
  LookupRows<float> lookup_rows;
  LookupRows<float>* lookups = nullptr;
  if (o.split_blocks > 0) {
    model.set_output_projection_blocks(o.split_blocks, o.block_align);
    lookups = &lookup_rows;
  }
  const size_t n = model.parameter_count();
  std::vector<float> host(n);
  std::mt19937_64 rng(2);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& p : host) p = normal(rng);
  for (const ParamTensor& t : model.layout().tensors()) {
    if (t.init == ParamInit::kOnes) std::fill(host.begin() + t.offset, host.begin() + t.offset + t.size(), 1.0f);
  }
  DeviceBuffer<float> params = be.Allocate<float>(n), grad = be.Allocate<float>(n);
  const std::shared_ptr<void> pinned = o.upload ? be.PinHostMemory(host.data(), n * sizeof(float)) : nullptr;
  params.Upload(host.data(), n);
  std::FILE* step_times = nullptr;
  if (!o.step_times.empty() && (step_times = std::fopen(o.step_times.c_str(), "w")) == nullptr) {
    std::fprintf(stderr, "psformer_gpu_bench: cannot write %s\n", o.step_times.c_str());
    return 1;
  }
  if (batches.empty()) batches.push_back(FullBatch(o.sentences, o.len, vocab));

  std::vector<double> times;
  double loss = 0;
  // The timed steps' mean shape (sentences, padded lengths, tokens).
  double sentences = 0, src_len = 0, tgt_len = 0, src_tokens = 0, tgt_tokens = 0, flops = 0;
  for (int step = 1; step <= o.warmup + o.steps; ++step) {
    const Batch& batch = batches[(step - 1) % batches.size()];
    if (step > o.warmup) {
      sentences += batch.sentences;
      src_len += batch.src_len;
      tgt_len += batch.tgt_len;
      src_tokens += static_cast<double>(batch.src_tokens);
      tgt_tokens += static_cast<double>(batch.tgt_tokens);
      flops += ModelFlops(config, vocab, batch.sentences, batch.src_len, batch.tgt_len);
    }
    be.Synchronize();
    timed.Reset();
    const auto start = std::chrono::steady_clock::now();
    if (o.upload) params.Upload(host.data(), n);
    const StepStats stats = model.ForwardBackward(params.data(), batch, DropoutKey{1, static_cast<uint32_t>(step), 0},
                                                  grad.data(), nullptr, nullptr, lookups);
    be.Synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step > o.warmup) times.push_back(seconds);
    if (step_times != nullptr) {
      std::fprintf(step_times, "%d %.3f %d %d %d %lld\n", step, seconds * 1e3, batch.sentences, batch.src_len,
                   batch.tgt_len, static_cast<long long>(batch.tgt_tokens));
    }
    loss = stats.loss_sum / std::max<int64_t>(1, stats.target_tokens);
  }
  if (step_times != nullptr && std::fclose(step_times) != 0) {
    std::fprintf(stderr, "psformer_gpu_bench: writing %s failed\n", o.step_times.c_str());
    return 1;
  }
  const double mean_s = std::accumulate(times.begin(), times.end(), 0.0) / times.size();
  const double steps = static_cast<double>(times.size());
  std::sort(times.begin(), times.end());
  // One batch: the median step; a job's batches differ in shape: the mean over them.
  const double median = o.corpus.empty() ? times[times.size() / 2] : mean_s;
  flops /= steps;
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : PeakTflops(be.device_name(), o.math);
  const double tflops = flops / median / 1e12;
  const DeviceMemoryStats& mem = be.memory_stats();
  std::string impl =
      o.fused_epilogues ? (o.corpus.empty() ? "psformer-cuda" : "psformer-cuda-job-batches") : "psformer-cuda-unfused";
  if (o.split_blocks > 0) impl += "-split" + std::to_string(o.split_blocks) + "-align" + std::to_string(o.block_align);
  std::printf(
      "impl=%s gpu=\"%s\" math=%s params=%zu batch=%dx%d src_tokens=%lld tgt_tokens=%lld "
      "step_ms=%.1f (min %.1f) tgt_tokens_per_s=%.0f tflops=%.1f mfu=%s peak_mem_gib=%.2f loss=%.4f\n",
      impl.c_str(), be.device_name().c_str(), GemmMathName(o.math), n, static_cast<int>(sentences / steps + 0.5),
      static_cast<int>((src_len + tgt_len) / (2 * steps) + 0.5), static_cast<long long>(src_tokens / steps),
      static_cast<long long>(tgt_tokens / steps), median * 1e3, times.front() * 1e3, tgt_tokens / steps / median,
      tflops, peak > 0 ? (std::to_string(100.0 * tflops / peak).substr(0, 5) + "%").c_str() : "n/a",
      mem.peak_reserved_bytes / double(1 << 30), loss);
  if (o.profile) {
    double total = 0;
    for (const auto& [name, e] : timed.entries()) total += e.seconds;
    std::printf("per-operation time of the last step (synchronised after each call), %.1f ms in all:\n", total * 1e3);
    for (const auto& [name, e] : timed.entries()) {
      std::printf("  %-22s %6lld calls %9.2f ms %5.1f%%\n", name.c_str(), static_cast<long long>(e.calls),
                  e.seconds * 1e3, 100 * e.seconds / total);
    }
  }
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) {
  auto options = psformer::ParseArgs(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "psformer_gpu_bench: %s\n", options.status().ToString().c_str());
    return 2;
  }
  return psformer::Run(options.value());
}
