// `psformer train` on configs/copy.pbtxt as a user runs it (label `integration`): it must learn
// the copy task to valid_accuracy >= 0.99 and leave metrics.jsonl and model.bin in the run
// directory; `psformer checksum` digests the model and rejects bad files clearly.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <vector>

#include "common/bfloat16.h"
#include "common/model_file.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::EndsSaying;
using testing::MetricValues;
using testing::RunPsformer;
using testing::TempDir;

// Each test's directory, with run directory `run_` in it, and the copy task trained there.
class CopyTraining : public ::testing::Test {
 protected:
  // `psformer train` of configs/copy.pbtxt, with `settings`, into run directory `run`.
  static testing::CommandResult TrainCopy(const std::string& settings, const std::string& run) {
    return RunPsformer("train --config configs/copy.pbtxt " + settings + " --run-dir " + run);
  }

  // The last / the highest value of `key` in run_'s metrics.jsonl, or -1.
  double LastMetric(const std::string& key) const {
    const std::vector<double> v = MetricValues(run_ + "/metrics.jsonl", key);
    return v.empty() ? -1 : v.back();
  }
  double BestMetric(const std::string& key) const {
    const std::vector<double> v = MetricValues(run_ + "/metrics.jsonl", key);
    return v.empty() ? -1 : *std::max_element(v.begin(), v.end());
  }

  TempDir dir_;
  const std::string run_ = dir_.File("run");
};

TEST_F(CopyTraining, ReachesValidAccuracy99AndWritesTheRunDirectory) {
  auto r = TrainCopy("", run_);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_GE(LastMetric("valid_accuracy"), 0.99) << r.output;
  EXPECT_GT(LastMetric("tokens_per_s"), 0.0);
  EXPECT_TRUE(std::filesystem::exists(run_ + "/model.bin"));
  EXPECT_TRUE(std::filesystem::exists(run_ + "/config.pbtxt"));
  EXPECT_TRUE(std::filesystem::exists(run_ + "/logs/worker-0.log"));
  EXPECT_TRUE(std::filesystem::exists(run_ + "/logs/pserver-0.log"));

  // The console of `psformer train` shows the coordinator's progress, every line of it: each
  // interval and each validation that metrics.jsonl holds, and why training stopped.
  const auto count = [&](const std::string& pattern) {
    const std::regex re(pattern);
    return std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), re), std::sregex_iterator());
  };
  EXPECT_EQ(count("worker-0: step [0-9]+/1500  loss [0-9.]+  lr [0-9.e+-]+  [0-9]+ tokens/s  elapsed"),
            static_cast<long>(MetricValues(run_ + "/metrics.jsonl", "tokens_per_s").size()))
      << r.output;
  EXPECT_EQ(count("worker-0: step [0-9]+/1500  valid loss [0-9.]+  nll [0-9.]+  ppl [0-9.]+  accuracy [0-9.]+"),
            static_cast<long>(MetricValues(run_ + "/metrics.jsonl", "valid_accuracy").size()))
      << r.output;
  EXPECT_EQ(count("worker-0: step 50/1500  loss "), 1) << r.output;
  EXPECT_EQ(
      count(
          "worker-0: valid_accuracy (0\\.99[0-9]|1\\.000) reached training\\.stop_at_valid_accuracy 0\\.99: stopping"),
      1)
      << r.output;

  auto sum = RunPsformer("checksum " + run_ + "/model.bin");
  EXPECT_EQ(sum.exit_status, 0) << sum.output;
  EXPECT_TRUE(std::regex_search(sum.output, std::regex("^[0-9a-f]{64}  [0-9]+ parameters  "))) << sum.output;
}

// The step of the first validation line reaching valid_accuracy >= 0.99, or -1.
int64_t StepReaching99(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  const std::regex pattern("\"step\": ([0-9]+), .*\"valid_accuracy\": ([-0-9.e+]+)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, pattern) && std::stod(m[2].str()) >= 0.99) return std::stoll(m[1].str());
  }
  return -1;
}

// Two workers learn the copy task as well as one: in BSP the batch of a step is split between
// them and the servers sum their gradients, so a step is the same mathematics with one worker or
// two. Only the rounding differs (two partial sums instead of one), and that sends training down
// another path: across CPUs and worker counts the first validation at 0.99 has come anywhere
// from step 350 to 700 (validations every 50 steps). So "as well as" is "within 1.25x the steps
// of one worker, plus one validation interval", not "no more steps", which held on one CPU's
// rounding and failed on another's (400 against 450).
TEST_F(CopyTraining, TwoWorkersLearnItAsWellAsOne) {
  auto one = TrainCopy("", dir_.File("one"));
  ASSERT_EQ(one.exit_status, 0) << one.output;
  auto two = TrainCopy("--set cluster.workers=2", dir_.File("two"));
  ASSERT_EQ(two.exit_status, 0) << two.output;
  const int64_t steps_one = StepReaching99(dir_.File("one") + "/metrics.jsonl");
  const int64_t steps_two = StepReaching99(dir_.File("two") + "/metrics.jsonl");
  ASSERT_GT(steps_one, 0);
  ASSERT_GT(steps_two, 0) << "two workers never reached valid_accuracy 0.99";
  std::cout << "valid_accuracy 0.99 first reached at step " << steps_one << " (one worker), " << steps_two
            << " (two workers)\n";
  constexpr int64_t kValidEvery = 50;  // configs/copy.pbtxt
  EXPECT_LE(steps_two, steps_one * 5 / 4 + kValidEvery) << "one worker: " << steps_one << ", two: " << steps_two;
}

TEST_F(CopyTraining, AsyncModeConverges) {
  auto r = TrainCopy("--set cluster.workers=2 --set cluster.consistency=ASYNC", run_);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  // Async is not deterministic, and its accuracy wanders by a few points late in a run (two
  // updates a step from half batches each): converging means getting there, not ending there.
  // Most runs reach 0.99 and stop; one (2026-12-07, Zen kernels) sat at 0.91 from step 1000 to
  // 1450 and ended at 0.944, so the bar is 0.9: far above the 0.26 of the first validations.
  EXPECT_GE(BestMetric("valid_accuracy"), 0.9) << r.output;
  EXPECT_GE(LastMetric("valid_accuracy"), 0.8) << r.output;
}

// Mixed precision on the wire: bf16 parameter copies to the workers, bf16 gradients back, fp32
// masters and Adam on the servers. It learns as well, and the model it writes holds the fp32
// masters (pulled in fp32 at the end), not their bf16 copies.
TEST_F(CopyTraining, Bf16ParametersAndGradientsOnTheWireLearnItToo) {
  auto r = TrainCopy("--set cluster.workers=2 --set cluster.param_dtype=BF16 --set cluster.gradient_dtype=BF16", run_);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_GE(LastMetric("valid_accuracy"), 0.99) << r.output;
  // The servers say how many pulls they answered in bf16: all but those after validated steps.
  std::smatch m;
  const std::string log = testing::ReadTextFile(run_ + "/logs/pserver-0.log");
  ASSERT_TRUE(std::regex_search(log, m, std::regex("pulls answered: ([0-9]+) \\(([0-9]+) in bf16\\)"))) << log;
  EXPECT_GT(std::stoll(m[2].str()), std::stoll(m[1].str()) / 2) << m.str();
  EXPECT_LT(std::stoll(m[2].str()), std::stoll(m[1].str())) << m.str();
  auto model = ReadModelFile(run_ + "/model.bin");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  size_t not_bf16 = 0;
  for (float p : model->params) not_bf16 += Bf16ToFloat(FloatToBf16(p)) != p;
  EXPECT_GT(not_bf16, model->params.size() / 2);
}

TEST_F(CopyTraining, LocalTrainerAlsoLearnsIt) {
  auto r = RunPsformer("train --local --config configs/copy.pbtxt --run-dir " + run_);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_GE(LastMetric("valid_accuracy"), 0.99) << r.output;
  EXPECT_TRUE(std::filesystem::exists(run_ + "/logs/trainer.log"));
}

TEST_F(CopyTraining, ResumeContinuesFromTheSavedState) {
  const std::string quick =
      "train --local --config configs/copy.pbtxt --set training.valid_every=0 --set logging.every_steps=5 ";
  ASSERT_EQ(RunPsformer(quick + "--set training.max_steps=10 --run-dir " + run_).exit_status, 0);
  auto r = RunPsformer(quick + "--set training.max_steps=20 --resume --run-dir " + run_);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("resuming"), std::string::npos) << r.output;
  EXPECT_EQ(LastMetric("step"), 20);
}

TEST_F(CopyTraining, ResumeWithoutStateOrRunDirIsAClearError) {
  auto no_dir = RunPsformer("train --config configs/copy.pbtxt --resume");
  EXPECT_TRUE(EndsSaying(no_dir, 2, "--run-dir"));
  auto no_state = RunPsformer("train --local --config configs/copy.pbtxt --resume --run-dir " + dir_.File("empty"));
  EXPECT_TRUE(EndsSaying(no_state, 1, "trainer_state.bin"));
}

TEST(Checksum, BadFilesAreClearErrors) {
  TempDir dir;
  auto missing = RunPsformer("checksum " + dir.File("none.bin"));
  EXPECT_TRUE(EndsSaying(missing, 1, "none.bin"));
  auto foreign = RunPsformer("checksum " + dir.Write("text.bin", "hello, not a model\n"));
  EXPECT_TRUE(EndsSaying(foreign, 1, "wrong magic"));
  EXPECT_EQ(foreign.output.find("terminate called"), std::string::npos) << foreign.output;
  auto usage = RunPsformer("checksum");
  EXPECT_EQ(usage.exit_status, 2) << usage.output;
}

}  // namespace
}  // namespace psformer
