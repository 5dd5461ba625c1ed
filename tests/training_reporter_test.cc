// The pieces both training loops share (worker/train/training_reporter.h, worker/validation.h):
// each metrics.jsonl line checked key by key and value by value, the validation BLEU files, the
// early-stopping rule and its cadence, and model.bin.
#include "worker/train/training_reporter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "common/config_loader.h"
#include "common/lr_schedule.h"
#include "common/metrics_log.h"
#include "common/model_file.h"
#include "common/param_layout.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::TempDir;

// metrics.jsonl holds a double to 9 significant digits: the relative error of a value read back.
constexpr double kWritten = 1e-8;

proto::JobConfig SmallConfig() {
  auto config = ParseConfigText(R"(
    name: "reporter"
    model { layers: 1 d_model: 16 d_ff: 32 heads: 2 max_positions: 32 }
    optimizer { warmup_steps: 20 }
    data { task: COPY copy_vocab_size: 12 }
    logging { every_steps: 10 tensorboard: false }
    training { max_steps: 100 valid_every: 25 }
  )",
                                "reporter");
  EXPECT_TRUE(config.ok()) << config.status().message();
  FillDefaults(&config.value());
  return *config;
}

std::unique_ptr<TrainingReporter> OpenReporter(const proto::JobConfig& config, const std::string& dir) {
  TrainingReporter::Options options;
  options.run_dir = dir;
  options.tensorboard = config.logging().tensorboard();
  auto reporter = TrainingReporter::Open(config, options);
  EXPECT_TRUE(reporter.ok()) << reporter.status().message();
  return std::move(*reporter);
}

std::vector<MetricsRecord> ReadLines(const TempDir& dir) {
  auto lines = ReadMetricsFile(dir.File("metrics.jsonl"));
  EXPECT_TRUE(lines.ok()) << lines.status().message();
  return lines.ok() ? *lines : std::vector<MetricsRecord>();
}

std::set<std::string> Keys(const MetricsRecord& record) {
  std::set<std::string> keys;
  for (const auto& [key, value] : record) keys.insert(key);
  return keys;
}

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// An interval's wall clock runs from its first step's start to its last step's end, and the
// next one begins there: a line logged in the middle of a step (the pull confirmed after its
// forward) neither counts that step's time nor loses it from the next line.
TEST(TrainingReporter, AnIntervalSpansItsStepsAndTheNextBeginsWhereItEnded) {
  TrainInterval interval;
  const auto began = interval.start;
  EXPECT_EQ(interval.end, began);
  TrainInterval step;
  step.tokens = 7;
  step.device_s = 0.5;
  interval.AddStep(step);
  interval.AddStep(step);
  EXPECT_EQ(interval.tokens, 14);
  EXPECT_EQ(interval.device_s, 1.0);
  EXPECT_EQ(interval.start, began);
  EXPECT_GE(interval.end, began);
  const auto ended = interval.end;
  // Time passing after the last step (the rest of the step the line is logged in) is not the line's.
  while (std::chrono::steady_clock::now() == ended) {
  }
  EXPECT_EQ(interval.end, ended);
  const TrainInterval next = interval.Next();
  EXPECT_EQ(next.start, ended);
  EXPECT_EQ(next.end, ended);
  EXPECT_EQ(next.tokens, 0);
  EXPECT_EQ(next.device_s, 0.0);
}

TEST(TrainingReporter, AJobsTrainLineHoldsEveryKeyWithItsValue) {
  TempDir dir;
  const proto::JobConfig config = SmallConfig();
  auto reporter = OpenReporter(config, dir.path().string());
  reporter->Start(1);
  const TrainInterval interval{.loss_sum = 460.0,
                               .tokens = 200,
                               .compute_s = 1.5,
                               .push_s = 0.25,
                               .wait_s = 0.125,
                               .pull_s = 0.0625,
                               .device_s = 1.25,
                               .launch_cpu_s = 0.03125,
                               .has_step_times = true,
                               .start = std::chrono::steady_clock::now() - std::chrono::seconds(4),
                               .end = std::chrono::steady_clock::now()};
  ASSERT_TRUE(reporter->Train(10, interval).ok());

  const auto lines = ReadLines(dir);
  ASSERT_EQ(lines.size(), 1u);
  const MetricsRecord& line = lines[0];
  EXPECT_EQ(Keys(line), (std::set<std::string>{"step", "steps", "loss", "ppl", "lr", "tokens", "tokens_per_s",
                                               "compute_s", "push_s", "wait_s", "pull_s", "device_s", "launch_cpu_s"}));
  EXPECT_EQ(line.at("step"), 10);
  EXPECT_EQ(line.at("steps"), 10);  // steps 1 to 10
  EXPECT_DOUBLE_EQ(line.at("loss"), 2.3);
  EXPECT_NEAR(line.at("ppl"), std::exp(2.3), kWritten * std::exp(2.3));
  EXPECT_NEAR(line.at("lr"), LearningRate(config, 10), kWritten * LearningRate(config, 10));
  EXPECT_EQ(line.at("tokens"), 200);
  // 200 tokens over the 4 s from the interval's first step's start to its last one's end.
  EXPECT_NEAR(line.at("tokens_per_s"), 50.0, 0.5);
  EXPECT_EQ(line.at("compute_s"), 1.5);
  EXPECT_EQ(line.at("push_s"), 0.25);
  EXPECT_EQ(line.at("wait_s"), 0.125);
  EXPECT_EQ(line.at("pull_s"), 0.0625);
  EXPECT_EQ(line.at("device_s"), 1.25);
  EXPECT_EQ(line.at("launch_cpu_s"), 0.03125);

  // The keys in the order readers of the raw line (plots, people) have always seen.
  const std::string text = FileText(dir.File("metrics.jsonl"));
  size_t at = 0;
  for (const char* key :
       {"\"step\"", "\"loss\"", "\"ppl\"", "\"lr\"", "\"tokens\"", "\"tokens_per_s\"", "\"compute_s\"", "\"push_s\"",
        "\"wait_s\"", "\"pull_s\"", "\"device_s\"", "\"launch_cpu_s\"", "\"steps\""}) {
    const size_t found = text.find(key, at);
    ASSERT_NE(found, std::string::npos) << key << " missing or out of order in " << text;
    at = found;
  }
}

TEST(TrainingReporter, ALineCountsTheIntervalsTokensAndHasNoStepTimesWithoutThem) {
  TempDir dir;
  const proto::JobConfig config = SmallConfig();
  auto reporter = OpenReporter(config, dir.path().string());
  reporter->Start(1);
  ASSERT_TRUE(reporter->Train(10, {.loss_sum = 30, .tokens = 10}).ok());
  ASSERT_TRUE(reporter->Train(20, {.loss_sum = 20, .tokens = 40}).ok());
  ASSERT_TRUE(reporter->Train(23, {.loss_sum = 6, .tokens = 12}).ok());  // a run's last line: 3 steps

  const auto lines = ReadLines(dir);
  ASSERT_EQ(lines.size(), 3u);
  for (const MetricsRecord& line : lines) {
    EXPECT_EQ(Keys(line), (std::set<std::string>{"step", "steps", "loss", "ppl", "lr", "tokens", "tokens_per_s"}));
  }
  EXPECT_EQ(lines[0].at("steps"), 10);
  EXPECT_EQ(lines[1].at("steps"), 10);
  EXPECT_EQ(lines[2].at("steps"), 3);
  EXPECT_EQ(lines[0].at("tokens"), 10);
  EXPECT_EQ(lines[1].at("tokens"), 40);  // the interval's, as `psformer status` reads it
  EXPECT_DOUBLE_EQ(lines[0].at("loss"), 3.0);
  EXPECT_DOUBLE_EQ(lines[1].at("loss"), 0.5);  // the interval's own loss, not the run's
}

TEST(TrainingReporter, AnEmptyIntervalHasLossZeroNotNaN) {
  TempDir dir;
  auto reporter = OpenReporter(SmallConfig(), dir.path().string());
  ASSERT_TRUE(reporter->Train(10, TrainInterval()).ok());
  const auto lines = ReadLines(dir);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("loss"), 0.0);
  EXPECT_EQ(lines[0].at("ppl"), 1.0);
  EXPECT_EQ(lines[0].at("tokens"), 0);
}

ValidationResult SomeValidation() {
  ValidationResult v;
  v.loss = 1.25;
  v.nll = 1.0;
  v.ppl = std::exp(1.0);
  v.accuracy = 0.75;
  v.tokens = 400;
  return v;
}

TEST(TrainingReporter, AValidationLineWithoutBleuWritesNoBleuFiles) {
  TempDir dir;
  auto reporter = OpenReporter(SmallConfig(), dir.path().string());
  ASSERT_TRUE(reporter->Validation(25, SomeValidation(), nullptr, {}).ok());
  const auto lines = ReadLines(dir);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(Keys(lines[0]),
            (std::set<std::string>{"step", "valid_loss", "valid_nll_loss", "valid_ppl", "valid_accuracy"}));
  EXPECT_EQ(lines[0].at("step"), 25);
  EXPECT_EQ(lines[0].at("valid_loss"), 1.25);
  EXPECT_EQ(lines[0].at("valid_nll_loss"), 1.0);
  EXPECT_NEAR(lines[0].at("valid_ppl"), std::exp(1.0), kWritten * std::exp(1.0));
  EXPECT_EQ(lines[0].at("valid_accuracy"), 0.75);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "valid_bleu"));
}

TEST(TrainingReporter, AValidationWithBleuWritesTheScoreAndTheTranslationsItScored) {
  TempDir dir;
  auto reporter = OpenReporter(SmallConfig(), dir.path().string());
  ValidationResult v = SomeValidation();
  v.bleu = 37.5;
  const std::vector<std::string> references = {"3 4 5", "6 7"};
  ASSERT_TRUE(reporter->Validation(50, v, &references, {"3 4", "6 7"}).ok());
  const auto lines = ReadLines(dir);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(Keys(lines[0]), (std::set<std::string>{"step", "valid_loss", "valid_nll_loss", "valid_ppl",
                                                   "valid_accuracy", "valid_bleu"}));
  EXPECT_EQ(lines[0].at("valid_bleu"), 37.5);
  EXPECT_EQ(FileText(dir.File("valid_bleu/reference.txt")), "3 4 5\n6 7\n");
  EXPECT_EQ(FileText(dir.File("valid_bleu/step-00000050.hyp")), "3 4\n6 7\n");
}

TEST(TrainingReporter, AStepAlreadyReportedIsNotWrittenAgain) {
  TempDir dir;
  const proto::JobConfig config = SmallConfig();
  {
    auto reporter = OpenReporter(config, dir.path().string());
    ASSERT_TRUE(reporter->Train(10, TrainInterval()).ok());
  }
  // A resumed run recomputing from an earlier checkpoint reopens the same metrics.jsonl.
  auto reporter = OpenReporter(config, dir.path().string());
  ASSERT_TRUE(reporter->Train(10, TrainInterval()).ok());
  ASSERT_TRUE(reporter->Train(20, TrainInterval()).ok());
  const auto lines = ReadLines(dir);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].at("step"), 10);
  EXPECT_EQ(lines[1].at("step"), 20);
}

TEST(TrainingReporter, WritesAModelFileThatReadsBack) {
  TempDir dir;
  const proto::JobConfig config = SmallConfig();
  auto reporter = OpenReporter(config, dir.path().string());
  const int vocab = 15;
  std::vector<float> params(ParamLayout(config.model(), vocab).total_size());
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i % 97) * 0.01f;
  ASSERT_TRUE(reporter->WriteModel(100, vocab, params).ok());
  auto read = ReadModelFile(dir.File("model.bin"));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->vocab_size, vocab);
  EXPECT_EQ(read->params, params);
  EXPECT_EQ(read->spm_digest, "");  // the copy task has no SentencePiece model
}

// A model trained on a corpus records its SentencePiece model (what translate and export check
// --spm against); one whose corpus lost it is not written without it.
TEST(TrainingReporter, AModelOfACorpusRecordsItsSentencePieceModel) {
  TempDir dir;
  proto::JobConfig config = SmallConfig();
  config.mutable_data()->set_task(proto::DataConfig::CORPUS);
  config.mutable_data()->set_train_dir(dir.File("corpus"));
  std::filesystem::create_directories(dir.File("corpus"));
  const std::string spm = "stands in for the corpus's SentencePiece model";
  dir.Write("corpus/spm.model", spm);
  std::filesystem::create_directories(dir.File("run"));
  auto reporter = OpenReporter(config, dir.File("run"));
  const int vocab = 15;
  const std::vector<float> params(ParamLayout(config.model(), vocab).total_size(), 0.5f);
  ASSERT_TRUE(reporter->WriteModel(100, vocab, params).ok());
  auto read = ReadModelFile(dir.File("run/model.bin"));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->spm_digest, SentencePieceDigest(spm));
  EXPECT_EQ(read->spm_digest.size(), 64u);

  std::filesystem::remove(dir.File("corpus/spm.model"));
  const Status lost = reporter->WriteModel(100, vocab, params);
  EXPECT_FALSE(lost.ok());
  EXPECT_NE(lost.message().find(dir.File("corpus/spm.model")), std::string::npos) << lost.message();
}

TEST(TrainingReporter, OpenFailsWithTheRunDirectoryInTheMessage) {
  TempDir dir;
  const std::string file = dir.Write("not-a-directory", "x");
  TrainingReporter::Options options;
  options.run_dir = file;
  options.tensorboard = false;
  auto reporter = TrainingReporter::Open(SmallConfig(), options);
  ASSERT_FALSE(reporter.ok());
  EXPECT_NE(reporter.status().message().find(file), std::string::npos) << reporter.status().message();
}

TEST(EarlyStopReason, NamesTheTargetReachedAndIsEmptyOtherwise) {
  proto::TrainingConfig training;
  ValidationResult v = SomeValidation();        // accuracy 0.75, no BLEU
  EXPECT_EQ(EarlyStopReason(training, v), "");  // no target set

  training.set_stop_at_valid_accuracy(0.8f);
  EXPECT_EQ(EarlyStopReason(training, v), "");
  v.accuracy = 0.8f;
  EXPECT_EQ(EarlyStopReason(training, v), "valid_accuracy 0.800 reached training.stop_at_valid_accuracy 0.8");

  training.set_stop_at_valid_accuracy(0);
  training.set_stop_at_valid_bleu(30);
  EXPECT_EQ(EarlyStopReason(training, v), "");  // BLEU not measured (NaN) never stops
  v.bleu = 29.9;
  EXPECT_EQ(EarlyStopReason(training, v), "");
  v.bleu = 30;
  EXPECT_EQ(EarlyStopReason(training, v), "valid_bleu 30.00 reached training.stop_at_valid_bleu 30");
}

TEST(ValidationDue, EveryValidEveryStepsAndNeverWithZero) {
  proto::TrainingConfig training;
  training.set_valid_every(25);
  EXPECT_FALSE(ValidationDue(training, 24));
  EXPECT_TRUE(ValidationDue(training, 25));
  EXPECT_TRUE(ValidationDue(training, 50));
  EXPECT_FALSE(ValidationDue(training, 51));
  training.set_valid_every(0);
  EXPECT_FALSE(ValidationDue(training, 25));
}

}  // namespace
}  // namespace psformer
