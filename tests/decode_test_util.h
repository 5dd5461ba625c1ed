// Helpers for the decoding tests: a small random model and the full-recomputation reference
// (Transformer<T>::Evaluate with teacher forcing) that incremental decoding must agree with.
#ifndef PSFORMER_TESTS_DECODE_TEST_UTIL_H_
#define PSFORMER_TESTS_DECODE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/model_file.h"
#include "common/param_init.h"
#include "common/param_layout.h"
#include "common/proto/config.pb.h"
#include "tests/device_test_util.h"
#include "tests/test_util.h"
#include "worker/backend/backend.h"
#include "worker/data/batch.h"
#include "worker/data/subword_vocabulary.h"
#include "worker/model/transformer.h"

namespace psformer::testing {

// A 40-piece joint BPE (SentencePiece model bytes) learnt from 200 lines made of nine words.
inline StatusOr<std::string> SmallBpeModel() {
  std::vector<std::string> side;
  const std::vector<std::string> words = {"in", "the", "beginning", "was", "word", "and", "light", "day", "night"};
  for (int i = 0; i < 200; ++i) {
    std::string line;
    for (int j = 0; j < 3 + i % 7; ++j) line += (j ? " " : "") + words[(i * 7 + j * 3) % words.size()];
    side.push_back(line);
  }
  BpeOptions bpe;
  bpe.vocab_size = 40;
  return TrainJointBpe({&side}, bpe);
}

inline proto::ModelConfig SmallModelConfig(bool pre_ln) {
  proto::ModelConfig config;
  config.set_layers(2);
  config.set_d_model(16);
  config.set_d_ff(24);
  config.set_heads(4);
  config.set_max_positions(32);
  config.set_norm_position(pre_ln ? proto::ModelConfig::PRE_LN : proto::ModelConfig::POST_LN);
  return config;
}

// The model's initial parameters plus uniform noise, so that biases and LayerNorm gains are not
// their trivial 0 / 1 and every parameter matters. `scale` sharpens the output distribution.
template <typename T>
std::vector<T> RandomParams(const ParamLayout& layout, uint64_t seed, double noise = 0.1) {
  std::vector<float> init(layout.total_size());
  InitParamRange(layout, seed, 0, layout.total_size(), init.data());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-noise, noise);
  std::vector<T> params(init.size());
  for (size_t i = 0; i < init.size(); ++i) params[i] = static_cast<T>(init[i] + uniform(rng));
  return params;
}

// A test's directory holding the small SentencePiece model (spm.model), where random model files
// of SmallModelConfig are written: what `psformer translate` and `psformer export` read.
class SmallModelFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto spm = SmallBpeModel();
    ASSERT_TRUE(spm.ok()) << spm.status().ToString();
    spm_ = dir_.Write("spm.model", *spm);
  }

  // Writes a model of `vocab` pieces with RandomParams to `name` in the directory; returns its path.
  // It records `spm_digest` as its SentencePiece model's: by default spm.model's, "" none (as a
  // model file of an older psformer).
  std::string WriteRandomModel(const std::string& name, int vocab, bool pre_ln = false,
                               std::optional<std::string> spm_digest = std::nullopt) {
    ModelFile file;
    file.model = SmallModelConfig(pre_ln);
    file.vocab_size = vocab;
    if (!spm_digest) {
      std::ifstream in(spm_, std::ios::binary);
      spm_digest = SentencePieceDigest(std::string(std::istreambuf_iterator<char>(in), {}));
    }
    file.spm_digest = *spm_digest;
    file.params = RandomParams<float>(ParamLayout(file.model, vocab), 3, 0.3);
    EXPECT_TRUE(WriteModelFile(dir_.File(name), file).ok());
    return dir_.File(name);
  }

  TempDir dir_;
  std::string spm_;  // the path of spm.model
};

// log_softmax of each row of logits (rows, vocab), in double.
template <typename T>
std::vector<double> LogSoftmaxRows(const std::vector<T>& logits, int vocab) {
  std::vector<double> out(logits.size());
  for (size_t r = 0; r * vocab < logits.size(); ++r) {
    const T* row = logits.data() + r * vocab;
    double max = row[0];
    for (int v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
    double sum = 0;
    for (int v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    for (int v = 0; v < vocab; ++v) out[r * vocab + v] = row[v] - max - std::log(sum);
  }
  return out;
}

// A batch with sources (each gets eos) and target prefixes (each gets bos in front; tgt_out is
// the prefix shifted, eos last), padded. Teacher forcing feeds tgt_in.
inline Batch MakeBatch(const std::vector<std::vector<int32_t>>& sources,
                       const std::vector<std::vector<int32_t>>& targets) {
  Batch batch;
  batch.sentences = static_cast<int32_t>(sources.size());
  for (const auto& s : sources) batch.src_len = std::max<int32_t>(batch.src_len, s.size() + 1);
  for (const auto& t : targets) batch.tgt_len = std::max<int32_t>(batch.tgt_len, t.size() + 1);
  batch.src.assign(static_cast<size_t>(batch.sentences) * batch.src_len, kPadId);
  batch.tgt_in.assign(static_cast<size_t>(batch.sentences) * batch.tgt_len, kPadId);
  batch.tgt_out.assign(batch.tgt_in.size(), kPadId);
  for (int b = 0; b < batch.sentences; ++b) {
    std::copy(sources[b].begin(), sources[b].end(), batch.src.begin() + b * batch.src_len);
    batch.src[b * batch.src_len + sources[b].size()] = kEosId;
    batch.tgt_in[b * batch.tgt_len] = kBosId;
    std::copy(targets[b].begin(), targets[b].end(), batch.tgt_in.begin() + b * batch.tgt_len + 1);
    std::copy(targets[b].begin(), targets[b].end(), batch.tgt_out.begin() + b * batch.tgt_len);
    batch.tgt_out[b * batch.tgt_len + targets[b].size()] = kEosId;
  }
  return batch;
}

// Whether an incremental decoder's log-probabilities at step t (`log_probs`: one row of `vocab`
// per decoder row, row r decoding sentence sentence_of_row[r]) are those of the full
// recomputation `reference` (B * tgt_len, vocab), each within `tolerance`; the first that is not
// is named.
inline ::testing::AssertionResult StepMatchesReference(const std::vector<double>& log_probs,
                                                       const std::vector<double>& reference,
                                                       const std::vector<int32_t>& sentence_of_row, int t, int tgt_len,
                                                       int vocab, double tolerance) {
  for (size_t r = 0; r < sentence_of_row.size(); ++r) {
    const int s = sentence_of_row[r];
    for (int v = 0; v < vocab; ++v) {
      const double got = log_probs[r * vocab + v], want = reference[(s * tgt_len + t) * vocab + v];
      if (!(std::abs(got - want) <= tolerance)) {
        return ::testing::AssertionFailure() << "row " << r << " (sentence " << s << ") step " << t << " token " << v
                                             << ": " << got << " vs the recomputation's " << want;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Full recomputation: log-probabilities (B * T, vocab) of every position of `batch` under the
// model, from Transformer<T>::Evaluate's logits.
template <typename T>
std::vector<double> ReferenceLogProbs(const proto::ModelConfig& config, int vocab, Backend<T>* backend,
                                      const std::vector<T>& params, const Batch& batch) {
  Transformer<T> model(config, vocab, backend);
  const DeviceBuffer<T> device_params = ToDevice(backend, params);
  model.Evaluate(device_params.data(), batch);
  std::vector<T> logits(static_cast<size_t>(batch.sentences) * batch.tgt_len * vocab);
  backend->CopyToHost(logits.data(), model.logits(), logits.size() * sizeof(T));
  return LogSoftmaxRows(logits, vocab);
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_DECODE_TEST_UTIL_H_
