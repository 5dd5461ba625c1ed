// Data pipeline costs (bench/RESULTS.md, "Data"): `psformer prepare` throughput, opening a corpus
// file, planning the sampler, and making a step's batches.
//
//   build/psformer_data_bench SRC TGT [VOCAB_SIZE]   prepare SRC/TGT (learn + encode, then encode
//                                                   only with the learnt model), then sampling
//   build/psformer_data_bench                        sampling on a synthetic 100k-pair corpus
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "worker/data/batch_builder.h"
#include "worker/data/corpus_file.h"
#include "worker/data/corpus_preparer.h"
#include "worker/data/deterministic_random.h"
#include "worker/data/in_memory_corpus.h"
#include "worker/data/length_bucket_sampler.h"

namespace psformer {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Sampler planning and per-step batch making at a few budgets and worker counts.
void BenchSampling(const ParallelCorpus& corpus) {
  for (int64_t budget : {2500, 25000}) {
    SamplerOptions options;
    options.src_tokens_per_step = budget;
    options.tgt_tokens_per_step = budget;
    auto start = std::chrono::steady_clock::now();
    auto sampler = LengthBucketSampler::Create(corpus, options);
    const double plan = Seconds(start);
    if (!sampler.ok()) {
      std::printf("sampler: %s\n", sampler.status().message().c_str());
      return;
    }
    const int64_t steps = sampler->batches_per_epoch();
    const PaddingStats padding = EpochPadding(corpus, *sampler);
    std::printf("budget %lld+%lld: plan %.3f s for %lld pairs, %lld batches/epoch, padding %.2f%%\n",
                static_cast<long long>(budget), static_cast<long long>(budget), plan,
                static_cast<long long>(corpus.size()), static_cast<long long>(steps), 100 * padding.fraction());
    for (int workers : {1, 8}) {
      start = std::chrono::steady_clock::now();
      int64_t rows = 0;
      // A step in a new epoch reshuffles the batch order: include those by crossing epochs.
      for (int64_t step = 1; step <= 2 * steps; ++step) {
        for (int w = 0; w < workers; ++w) rows += BuildBatch(corpus, sampler->WorkerShare(step, w, workers)).sentences;
      }
      const double total = Seconds(start);
      std::printf("  workers %d: %.1f us per step for all workers (%lld rows in %lld steps)\n", workers,
                  1e6 * total / static_cast<double>(2 * steps), static_cast<long long>(rows),
                  static_cast<long long>(2 * steps));
    }
  }
}

int Main(int argc, char** argv) {
  if (argc == 1) {
    SplitMix64 random(1);
    InMemoryCorpus corpus;
    for (int i = 0; i < 100000; ++i) {
      const int n = 5 + static_cast<int>(random.Below(60));
      const int m = n + static_cast<int>(random.Below(11)) - 5;
      corpus.Add(std::vector<int32_t>(n, 7), std::vector<int32_t>(m, 7));
    }
    std::printf("synthetic corpus: 100000 pairs, source lengths 5..64, target within 5 of the source\n");
    BenchSampling(corpus);
    return 0;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: psformer_data_bench [SRC TGT [VOCAB_SIZE]]\n");
    return 2;
  }
  const auto dir = std::filesystem::temp_directory_path() / ("psformer-data-bench-" + std::to_string(getpid()));
  PrepareOptions options;
  options.src_path = argv[1];
  options.tgt_path = argv[2];
  options.vocab_size = argc > 3 ? std::atoi(argv[3]) : 8000;
  options.out_dir = (dir / "learnt").string();
  auto learnt = PrepareCorpus(options);
  if (!learnt.ok()) {
    std::fprintf(stderr, "prepare: %s\n", learnt.status().message().c_str());
    return 1;
  }
  const double pairs = static_cast<double>(learnt->train.pairs_read);
  std::printf("prepare, learning a %d-piece vocabulary: %.2f s, %.0f pairs/s\n", learnt->vocab_size, learnt->seconds,
              pairs / learnt->seconds);
  options.spm_model = (dir / "learnt" / "spm.model").string();
  options.out_dir = (dir / "given").string();
  auto encoded = PrepareCorpus(options);
  if (!encoded.ok()) return 1;
  std::printf("prepare with --spm (read, encode, write): %.2f s, %.0f pairs/s\n", encoded->seconds,
              pairs / encoded->seconds);
  const auto start = std::chrono::steady_clock::now();
  auto corpus = CorpusFile::Open((dir / "given" / "train.bin").string());
  if (!corpus.ok()) return 1;
  std::printf("open train.bin (map, CRC, offset and id checks): %.3f s for %lld pairs\n", Seconds(start),
              static_cast<long long>((*corpus)->size()));
  BenchSampling(**corpus);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) { return psformer::Main(argc, argv); }
