// A trained model's export computes in transformers and CTranslate2 what psformer computes, for
// each norm position psformer trains: a POST_LN model (the `export_model` fixture, exported as
// MarianMTModel) and a PRE_LN one (`export_model_pre_ln`, exported as Pegasus), both trained by
// tests/export/train_model.sh: the same logits within 1e-4, the same
// greedy translations of held-out sentences, and beam-4 translations compared (their length
// penalties differ: docs/export.md). The Python side is tests/export/check_export.py, in the venv
// of the `export_venv` fixture; without it (no PyPI) the tests skip and say why.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "common/model_file.h"
#include "tests/decode_test_util.h"
#include "tests/test_util.h"
#include "worker/backend/cpu_backend.h"
#include "worker/data/subword_vocabulary.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using testing::RunShell;
using testing::TempDir;

const std::string kPython = std::string(PSFORMER_EXPORT_VENV) + "/bin/python";

// The venv's python as a command, with torch's compile cache (which importing transformers'
// models makes, by default /tmp/torchinductor_USER, left there for good) in a directory of this
// test binary's, removed when it ends.
std::string Python() {
  static const TempDir cache;
  return "TORCHINDUCTOR_CACHE_DIR=" + cache.File("torchinductor") + " " + kPython;
}

std::string Script() { return testing::SourceDir() + "/tests/export/check_export.py"; }

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

#define SKIP_WITHOUT_VENV()                                                                                   \
  do {                                                                                                        \
    if (!fs::exists(kPython)) {                                                                               \
      std::ifstream why(std::string(PSFORMER_EXPORT_VENV) + ".unavailable");                                  \
      GTEST_SKIP() << (why ? std::string(std::istreambuf_iterator<char>(why), {}) : "no venv at " + kPython); \
    }                                                                                                         \
  } while (0)

std::string Join(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (!out.empty()) out += ',';
    out += std::to_string(id);
  }
  return out;
}

// psformer's logits for (source, reference) pairs with teacher forcing, one sentence a batch, as
// check_export.py's cases: the source's ids with eos, the decoder's input (bos, reference), and
// the (target length, vocab) logits.
std::string LogitCases(const std::string& model_path, const std::string& spm_path,
                       const std::vector<std::string>& sources, const std::vector<std::string>& references) {
  auto model = ReadModelFile(model_path);
  auto vocabulary = SubwordVocabulary::FromFile(spm_path);
  EXPECT_TRUE(model.ok() && vocabulary.ok());
  CpuBackend<float> backend(1);
  Transformer<float> transformer(model->model, model->vocab_size, &backend);
  DeviceBuffer<float> params = backend.Allocate<float>(model->params.size());
  params.Upload(model->params.data(), model->params.size());
  std::ostringstream json;
  json.precision(9);
  json << "[";
  for (size_t i = 0; i < sources.size(); ++i) {
    std::vector<int> src, tgt;
    EXPECT_TRUE(vocabulary->Encode(sources[i], &src).ok() && vocabulary->Encode(references[i], &tgt).ok());
    const Batch batch = testing::MakeBatch({std::vector<int32_t>(src.begin(), src.end())},
                                           {std::vector<int32_t>(tgt.begin(), tgt.end())});
    transformer.Evaluate(params.data(), batch);
    std::vector<float> logits(static_cast<size_t>(batch.tgt_len) * model->vocab_size);
    backend.CopyToHost(logits.data(), transformer.logits(), logits.size() * sizeof(float));
    json << (i ? "," : "") << "\n{\"source\": " << JsonQuote(sources[i]) << ", \"source_ids\": [" << Join(batch.src)
         << "], \"decoder_ids\": [" << Join(batch.tgt_in) << "], \"logits\": [";
    for (int t = 0; t < batch.tgt_len; ++t) {
      json << (t ? "," : "") << "[";
      for (int v = 0; v < model->vocab_size; ++v) json << (v ? "," : "") << logits[t * model->vocab_size + v];
      json << "]";
    }
    json << "]}";
  }
  json << "\n]\n";
  return json.str();
}

// How many lines of `a` equal the same line of `b`; prints those that differ.
int SameLines(const std::vector<std::string>& a, const std::vector<std::string>& b, const std::string& what) {
  EXPECT_EQ(a.size(), b.size());
  int same = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] == b[i]) {
      ++same;
    } else {
      std::cout << what << " line " << i + 1 << ":\n  psformer: " << a[i] << "\n  other:    " << b[i] << "\n";
    }
  }
  std::cout << what << ": " << same << " of " << a.size() << " identical\n";
  return same;
}

// The parameter: the fixture's directory (tests/export/train_model.sh) of the model under test.
class ExportedModel : public ::testing::TestWithParam<std::string> {
 protected:
  ExportedModel() : model_dir_(GetParam()) {}

  std::string HeldOut(const std::string& split) const { return model_dir_ + "/corpus/test." + split; }

  // psformer translate's output for the held-out sentences.
  std::vector<std::string> PsformerTranslations(const std::string& options) {
    const auto r = RunShell(std::string(PSFORMER_BINARY) + " translate --threads 1 " + options + " --model " +
                            model_dir_ + "/run/model.bin --spm " + model_dir_ + "/data/spm.model < " + HeldOut("en") +
                            " > " + dir_.File("psformer.txt"));
    EXPECT_EQ(r.exit_status, 0) << r.output;
    return ReadLines(dir_.File("psformer.txt"));
  }

  // check_export.py's translations of the held-out sentences.
  std::vector<std::string> PythonTranslations(const std::string& arguments) {
    const auto r = RunShell("{ " + Python() + " " + Script() + " " + arguments + " < " + HeldOut("en") + " > " +
                            dir_.File("python.txt") + "; }");
    EXPECT_EQ(r.exit_status, 0) << r.output;
    return ReadLines(dir_.File("python.txt"));
  }

  void ExpectLogitsMatch(const std::string& model_path, const std::string& export_dir, size_t sentences) {
    std::vector<std::string> sources = ReadLines(HeldOut("en")), references = ReadLines(HeldOut("es"));
    sources.resize(sentences);
    references.resize(sentences);
    const std::string cases =
        dir_.Write("cases.json", LogitCases(model_path, model_dir_ + "/data/spm.model", sources, references));
    const auto r = RunShell(Python() + " " + Script() + " logits " + export_dir + " " + cases);
    std::cout << r.output;
    EXPECT_EQ(r.exit_status, 0) << r.output;
  }

  const std::string model_dir_;
  TempDir dir_;
};

TEST_P(ExportedModel, LogitsInTransformersEqualPsformers) {
  SKIP_WITHOUT_VENV();
  ExpectLogitsMatch(model_dir_ + "/run/model.bin", model_dir_ + "/hf", 40);
}

TEST_P(ExportedModel, GreedyTranslationsInTransformersEqualPsformers) {
  SKIP_WITHOUT_VENV();
  const auto psformer = PsformerTranslations("--beam 1");
  const auto hf = PythonTranslations("hf-translate " + model_dir_ + "/hf 1");
  EXPECT_GE(SameLines(psformer, hf, "greedy, transformers"), 198);  // of 200: at least 99 %
}

TEST_P(ExportedModel, BeamFourWithoutLengthPenaltyInTransformersEqualsPsformers) {
  SKIP_WITHOUT_VENV();
  // With no length penalty both searches are the same algorithm: the best 2k candidates by
  // log-probability, eos among the best k finishing, done when k have finished.
  const auto psformer = PsformerTranslations("--beam 4 --alpha 0");
  const auto hf = PythonTranslations("hf-translate " + model_dir_ + "/hf 4 --no-length-penalty");
  EXPECT_GE(SameLines(psformer, hf, "beam 4, no length penalty, transformers"), 198);
}

TEST_P(ExportedModel, BeamFourWithEachDefaultComparedWithPsformers) {
  SKIP_WITHOUT_VENV();
  // psformer divides by ((5 + |Y|) / 6)^0.6, transformers by |Y|^1 and stops by its heuristic
  // (docs/export.md): where hypotheses of two lengths score close the two pick differently. On
  // this model about 3 in 4 translations agree (149 of 200 when this test was written); the
  // bound only catches a search that has gone wrong altogether.
  const auto psformer = PsformerTranslations("--beam 4");
  const auto hf = PythonTranslations("hf-translate " + model_dir_ + "/hf 4");
  EXPECT_GE(SameLines(psformer, hf, "beam 4, each with its defaults, transformers"), 100);
}

TEST_P(ExportedModel, GreedyTranslationsInCTranslate2EqualPsformers) {
  SKIP_WITHOUT_VENV();
  const std::string ct2 = dir_.File("ct2");
  const auto r = RunShell(Python() + " " + testing::SourceDir() + "/scripts/ctranslate2-from-export.py " + model_dir_ +
                          "/hf " + ct2);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const auto psformer = PsformerTranslations("--beam 1");
  const auto translated = PythonTranslations("ct2-translate " + ct2 + " " + model_dir_ + "/hf 1");
  EXPECT_GE(SameLines(psformer, translated, "greedy, CTranslate2"), 198);
}

TEST_P(ExportedModel, AnAveragedModelExportsLikeAnyOther) {
  SKIP_WITHOUT_VENV();
  const std::string averaged = dir_.File("averaged.bin");
  auto r = testing::RunPsformer("average --run-dir " + model_dir_ + "/run --last 2 --output " + averaged);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  r = testing::RunPsformer("export --model " + averaged + " --spm " + model_dir_ + "/data/spm.model --out " +
                           dir_.File("hf"));
  ASSERT_EQ(r.exit_status, 0) << r.output;
  ExpectLogitsMatch(averaged, dir_.File("hf"), 10);
}

// Named by what the directory holds, not by its path.
std::string TrainedModel(const ::testing::TestParamInfo<std::string>&) { return "trained"; }
INSTANTIATE_TEST_SUITE_P(PostLnAsMarian, ExportedModel, ::testing::Values(std::string(PSFORMER_EXPORT_MODEL)),
                         TrainedModel);
INSTANTIATE_TEST_SUITE_P(PreLnAsPegasus, ExportedModel, ::testing::Values(std::string(PSFORMER_EXPORT_MODEL_PRE_LN)),
                         TrainedModel);

}  // namespace
}  // namespace psformer
