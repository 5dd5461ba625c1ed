// Validation BLEU during training (worker/valid_bleu.h): the score in metrics.jsonl is the one
// `psformer bleu` gives for the hypotheses and references the run wrote, and
// training.stop_at_valid_bleu ends the job on every worker; the local trainer does the same.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::CommandResult;
using testing::MetricValues;
using testing::RunPsformer;
using testing::TempDir;

std::string HypFile(const std::string& run, int step) {
  char name[64];
  std::snprintf(name, sizeof(name), "/valid_bleu/step-%08d.hyp", step);
  return run + name;
}

// Two workers train the copy task in `run`, scoring 25 validation sentences by BLEU; `settings`
// add to (or override) that.
CommandResult TrainWithValidBleu(const std::string& run, const std::string& settings) {
  return RunPsformer(
      "train --config configs/copy.pbtxt --set training.stop_at_valid_accuracy=0 "
      "--set training.valid_bleu_sentences=25 --set cluster.workers=2 " +
      settings + " --run-dir " + run);
}

int LineCount(const std::string& path) {
  const std::string text = testing::ReadTextFile(path);
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// `psformer bleu` on the 25 hypotheses a run wrote at `step` gives `bleu`, as metrics.jsonl has it.
void ExpectPsformerBleuSays(const std::string& run, int step, double bleu) {
  EXPECT_EQ(LineCount(HypFile(run, step)), 25);
  const CommandResult r =
      RunPsformer("bleu --hyp " + HypFile(run, step) + " --ref " + run + "/valid_bleu/reference.txt");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  char expected[32];
  std::snprintf(expected, sizeof(expected), "BLEU = %.2f ", bleu);
  EXPECT_EQ(r.output.rfind(expected, 0), 0u)
      << "step " << step << ": metrics say " << bleu << ", bleu says " << r.output;
}

// A run with training.stop_at_valid_bleu=60 stopped at its first score of 60 or more, early.
void ExpectStoppedAtBleu60(const std::string& run) {
  const std::vector<double> bleu = MetricValues(run + "/metrics.jsonl", "valid_bleu");
  ASSERT_FALSE(bleu.empty());
  EXPECT_GE(bleu.back(), 60.0);
  for (size_t i = 0; i + 1 < bleu.size(); ++i) EXPECT_LT(bleu[i], 60.0);
  EXPECT_LT(bleu.size(), 30u);  // stopped before max_steps
  EXPECT_NE(testing::ReadRunLogs(run).find("reached training.stop_at_valid_bleu"), std::string::npos);
}

TEST(ValidBleu, EqualsPsformerBleuOnTheSameHypotheses) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r =
      TrainWithValidBleu(run, "--set training.max_steps=60 --set training.valid_every=20 --set logging.every_steps=10");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const std::vector<double> bleu = MetricValues(run + "/metrics.jsonl", "valid_bleu");
  ASSERT_EQ(bleu.size(), 3u);
  EXPECT_EQ(LineCount(run + "/valid_bleu/reference.txt"), 25);
  for (int i = 0; i < 3; ++i) ExpectPsformerBleuSays(run, 20 * (i + 1), bleu[i]);
  // Training on the copy task makes the translations better.
  EXPECT_GT(bleu[2], bleu[0]);
}

TEST(ValidBleu, TheLocalTrainerMeasuresItTooAndStopsAtIt) {
  TempDir dir;
  const std::string run = dir.File("run");
  const CommandResult r = RunPsformer(
      "train --local --config configs/copy.pbtxt --set training.max_steps=1500 --set training.valid_every=50 "
      "--set training.stop_at_valid_accuracy=0 --set training.valid_bleu_sentences=25 "
      "--set training.stop_at_valid_bleu=60 --set logging.every_steps=50 --run-dir " +
      run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  ExpectStoppedAtBleu60(run);
  const std::vector<double> bleu = MetricValues(run + "/metrics.jsonl", "valid_bleu");
  ASSERT_GE(bleu.size(), 2u);
  // The first and the last score are what `psformer bleu` says of the hypotheses written.
  ExpectPsformerBleuSays(run, 50, bleu.front());
  ExpectPsformerBleuSays(run, 50 * static_cast<int>(bleu.size()), bleu.back());
}

TEST(ValidBleu, StopAtValidBleuEndsTheJob) {
  TempDir dir;
  const std::string run = dir.File("run");
  const CommandResult r = TrainWithValidBleu(
      run, "--set training.max_steps=1500 --set training.valid_every=50 --set training.stop_at_valid_bleu=60");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  ExpectStoppedAtBleu60(run);
}

TEST(ValidBleu, StopAtValidBleuNeedsSentences) {
  TempDir dir;
  const CommandResult r = RunPsformer(
      "train --config configs/copy.pbtxt --set training.stop_at_valid_bleu=20 "
      "--dry-run");
  EXPECT_NE(r.exit_status, 0);
  EXPECT_NE(r.output.find("training.stop_at_valid_bleu = 20: needs training.valid_bleu_sentences > 0"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace psformer
