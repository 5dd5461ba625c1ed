// A model trained on the copy task (configs/copy.pbtxt, local trainer) must translate sequences
// it never saw into exact copies, with beam search and greedily: the whole decoding path
// (encoder cache, incremental decoder, beam search) agrees with what training learnt.
#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/config_loader.h"
#include "worker/backend/cpu_backend.h"
#include "worker/data/batch.h"
#include "worker/data/batch_source.h"
#include "worker/decode/beam_search.h"
#include "worker/train/local_trainer.h"

namespace psformer {
namespace {

// Steps, not seconds, bound the training, so the test does the same work on every machine.
constexpr int kMaxSteps = 1000;
constexpr double kTargetAccuracy = 1.0;
// Steps trained past the first validation at kTargetAccuracy. Right at that point the model is at
// the edge: an end-of-sentence one step early can still win a beam by a hair (seen once, for one
// of 60 sequences, after a change that moved the training's rounding but not its mathematics).
constexpr int kSettleSteps = 100;

TEST(CopyTranslation, TrainedCopyModelCopiesHeldOutSequences) {
  auto config = LoadConfigFile(std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto source = MakeBatchSource(*config);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  LocalTrainer trainer(*config, source->get());
  double accuracy = 0;
  while (trainer.step() < kMaxSteps && accuracy < kTargetAccuracy) {
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(trainer.Step().ok());
    auto valid = trainer.Validate();
    ASSERT_TRUE(valid.ok()) << valid.status().ToString();
    accuracy = valid->accuracy;
  }
  for (int i = 0; i < kSettleSteps; ++i) ASSERT_TRUE(trainer.Step().ok());
  std::cout << "trained " << trainer.step() << " steps, valid accuracy " << accuracy << "\n";

  // Held out: drawn here, from a generator the task's corpora do not use.
  const proto::DataConfig& data = config->data();
  std::mt19937 rng(20261122);
  std::uniform_int_distribution<int> length(data.copy_min_length(), data.copy_max_length());
  std::uniform_int_distribution<int32_t> token(kNumReservedIds, data.copy_vocab_size() - 1);
  std::vector<std::vector<int32_t>> sequences(60);
  for (auto& s : sequences) {
    s.resize(length(rng));
    for (int32_t& t : s) t = token(rng);
  }

  CpuBackend<float> backend;
  DeviceBuffer<float> params = backend.Allocate<float>(trainer.params().size());
  params.Upload(trainer.params().data(), trainer.params().size());
  for (int beam : {4, 1}) {
    BeamSearchOptions options;
    options.beam = beam;
    BeamSearch<float> search(config->model(), trainer.vocab_size(), &backend, options);
    auto translations = search.Translate(params.data(), sequences);
    ASSERT_TRUE(translations.ok()) << translations.status().ToString();
    int exact = 0;
    for (size_t i = 0; i < sequences.size(); ++i) {
      exact += (*translations)[i].tokens == sequences[i];
      EXPECT_EQ((*translations)[i].tokens, sequences[i]) << "sequence " << i << " beam " << beam;
    }
    std::cout << "beam " << beam << ": " << exact << " of " << sequences.size() << " copied exactly\n";
  }
}

}  // namespace
}  // namespace psformer
