// TensorBoard event files (common/tensorboard/, common/run_metrics.h), read back with TensorBoard's
// own Python reader (tests/tensorboard/check_events.py, in the venv the `tensorboard_venv` fixture
// makes): the record format, a file cut short by a killed writer, no step written twice by a
// restarted writer or a resumed run, every number of metrics.jsonl present as a scalar, every
// role's restart as a text event, and each server's scalars in a run of its own.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "common/proto/tensorboard_event.pb.h"
#include "common/tensorboard/event_writer.h"
#include "common/tensorboard/record_file.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::RunPsformer;
using testing::RunShell;
using testing::TempDir;

CommandResult CheckEvents(const std::string& mode, const std::string& path) {
  return RunShell(std::string(PSFORMER_TENSORBOARD_PYTHON) + " " + testing::SourceDir() +
                  "/tests/tensorboard/check_events.py " + mode + " " + path);
}

// The lines "scalar TAG STEP VALUE" of a dump, for one tag, as (step, value) in file order.
std::vector<std::pair<int64_t, double>> DumpedScalars(const std::string& dump, const std::string& tag) {
  std::vector<std::pair<int64_t, double>> out;
  const std::regex line("scalar " + tag + " (-?[0-9]+) (\\S+)");
  for (auto it = std::sregex_iterator(dump.begin(), dump.end(), line); it != std::sregex_iterator(); ++it) {
    out.emplace_back(std::stoll((*it)[1].str()), std::stod((*it)[2].str()));
  }
  return out;
}

std::vector<fs::path> EventFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(RecordFile, FramesWithTensorBoardsMaskedCrc) {
  // The masked CRC-32C of the empty string and of "a", as TensorBoard's reader computes them.
  EXPECT_EQ(tensorboard::MaskedCrc32c("", 0), 0xa282ead8u);
  const std::string framed = tensorboard::FrameRecord("abc");
  ASSERT_EQ(framed.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(static_cast<unsigned char>(framed[0]), 3);
  for (int i = 1; i < 8; ++i) EXPECT_EQ(framed[i], 0);
  EXPECT_EQ(framed.substr(12, 3), "abc");
}

TEST(RecordFile, ReadsUpToTheLastWholeRecord) {
  TempDir dir;
  const std::string path = dir.File("records");
  {
    std::ofstream out(path, std::ios::binary);
    out << tensorboard::FrameRecord("first") << tensorboard::FrameRecord("second")
        << tensorboard::FrameRecord("third").substr(0, 10);
  }
  bool complete = true;
  auto records = tensorboard::ReadRecords(path, &complete);
  ASSERT_TRUE(records.ok()) << records.status().message();
  EXPECT_EQ(records.value(), (std::vector<std::string>{"first", "second"}));
  EXPECT_FALSE(complete);

  // A flipped byte in the second record's data: only the first is whole.
  std::string bytes = tensorboard::FrameRecord("first") + tensorboard::FrameRecord("second");
  bytes[bytes.size() - 6] ^= 0x20;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  records = tensorboard::ReadRecords(path, &complete);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records.value(), (std::vector<std::string>{"first"}));
  EXPECT_FALSE(tensorboard::ReadRecords(dir.File("missing")).ok());
  const auto directory = tensorboard::ReadRecords(dir.path().string());
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("a directory"), std::string::npos) << directory.status().message();
}

TEST(EventWriter, TensorBoardReadsScalarsAndText) {
  TempDir dir;
  const std::string logdir = dir.File("tb");
  {
    auto writer = tensorboard::EventWriter::Open(logdir);
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    for (int step = 1; step <= 5; ++step) {
      ASSERT_TRUE((*writer)->AddScalars(step, {{"train/loss", 10.0 / step}, {"train/lr", step * 1e-4}}).ok());
    }
    ASSERT_TRUE((*writer)->AddText("events", 3, "worker-1 restarted").ok());
  }
  const CommandResult r = CheckEvents("dump", logdir);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const auto loss = DumpedScalars(r.output, "train/loss");
  ASSERT_EQ(loss.size(), 5u) << r.output;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(loss[i].first, i + 1);
    EXPECT_EQ(loss[i].second, static_cast<double>(static_cast<float>(10.0 / (i + 1))));
  }
  EXPECT_EQ(DumpedScalars(r.output, "train/lr").size(), 5u);
  EXPECT_NE(r.output.find("text events 3 worker-1 restarted"), std::string::npos) << r.output;
}

TEST(EventWriter, CutFileIsReadToItsLastRecordAndARestartWritesNoStepTwice) {
  TempDir dir;
  const std::string logdir = dir.File("tb");
  {
    auto writer = tensorboard::EventWriter::Open(logdir);
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    for (int step = 1; step <= 5; ++step) ASSERT_TRUE((*writer)->AddScalar("train/loss", step, step).ok());
  }
  // A writer killed while writing step 5's record.
  const fs::path first = EventFiles(logdir).at(0);
  fs::resize_file(first, fs::file_size(first) - 3);
  CommandResult r = CheckEvents("dump", logdir);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  std::vector<std::pair<int64_t, double>> expected = {{1, 1}, {2, 2}, {3, 3}, {4, 4}};
  EXPECT_EQ(DumpedScalars(r.output, "train/loss"), expected) << r.output;

  // The restarted process recomputes from step 3; steps 3 and 4 are there already.
  {
    auto writer = tensorboard::EventWriter::Open(logdir);
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    EXPECT_EQ((*writer)->LastStep("train/loss"), 4);
    EXPECT_EQ((*writer)->LastStep("train/other"), -1);
    for (int step = 3; step <= 7; ++step) ASSERT_TRUE((*writer)->AddScalar("train/loss", step, step).ok());
  }
  ASSERT_EQ(EventFiles(logdir).size(), 2u);
  r = CheckEvents("dump", logdir);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  expected = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}};
  EXPECT_EQ(DumpedScalars(r.output, "train/loss"), expected) << r.output;
}

// "matched N scalars of M lines" from check_events.py metrics; -1 if absent.
int MatchedScalars(const std::string& output) {
  std::smatch m;
  static const std::regex kMatched("matched ([0-9]+) scalars of ([0-9]+) lines");
  return std::regex_search(output, m, kMatched) ? std::stoi(m[1].str()) : -1;
}

// The steps of metrics.jsonl's lines that have `key`, in file order.
std::vector<int64_t> StepsWith(const std::string& metrics, const std::string& key) {
  std::ifstream in(metrics);
  std::vector<int64_t> steps;
  std::string line;
  std::smatch m;
  static const std::regex kStep("\"step\": ([0-9]+)");
  while (std::getline(in, line)) {
    if (line.find("\"" + key + "\"") != std::string::npos && std::regex_search(line, m, kStep)) {
      steps.push_back(std::stoll(m[1].str()));
    }
  }
  return steps;
}

const char* kJob =
    "--config configs/copy.pbtxt --set training.stop_at_valid_accuracy=0 --set logging.every_steps=5 "
    "--set training.valid_every=10 --set checkpoint.every_steps=10 --set cluster.workers=2";

TEST(TrainingEvents, EveryMetricIsAScalarAndAResumedRunRepeatsNoStep) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kJob + " --set training.max_steps=30 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  r = CheckEvents("metrics", run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  // 6 training lines of 11 numbers besides the step and 3 validations of 4 (step 10, 20, 30).
  EXPECT_EQ(MatchedScalars(r.output), 6 * 11 + 3 * 4) << r.output;

  // The validation's perplexity is that of the NLL, not of the label-smoothed loss.
  const auto nll = testing::MetricValues(run + "/metrics.jsonl", "valid_nll_loss");
  const auto ppl = testing::MetricValues(run + "/metrics.jsonl", "valid_ppl");
  const auto smoothed = testing::MetricValues(run + "/metrics.jsonl", "valid_loss");
  ASSERT_EQ(nll.size(), 3u);
  ASSERT_EQ(ppl.size(), 3u);
  ASSERT_EQ(smoothed.size(), 3u);
  for (size_t i = 0; i < nll.size(); ++i) {
    EXPECT_NEAR(ppl[i], std::exp(nll[i]), 1e-6 * ppl[i]);
    EXPECT_NE(nll[i], smoothed[i]);  // label_smoothing 0.1 in the copy config
  }

  // Resume from the checkpoint of step 20 (the one of step 30 removed), to step 40: steps 21-30
  // are computed again, and neither metrics.jsonl nor the event files get them twice.
  std::error_code ec;
  fs::remove_all(run + "/checkpoints/step-00000030", ec);
  r = RunPsformer("train --config " + run + "/config.pbtxt --run-dir " + run + " --resume --set training.max_steps=40");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(StepsWith(run + "/metrics.jsonl", "loss"), (std::vector<int64_t>{5, 10, 15, 20, 25, 30, 35, 40}));
  EXPECT_EQ(StepsWith(run + "/metrics.jsonl", "valid_loss"), (std::vector<int64_t>{10, 20, 30, 40}));
  r = CheckEvents("metrics", run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(MatchedScalars(r.output), 8 * 11 + 4 * 4) << r.output;
}

// The step of the first text event of `tag` matching `text` (a regex) in a dump; -1 if none.
int64_t TextStep(const std::string& dump, const std::string& tag, const std::string& text) {
  std::smatch m;
  return std::regex_search(dump, m, std::regex("text " + tag + " ([0-9]+) " + text)) ? std::stoll(m[1].str()) : -1;
}

TEST(TrainingEvents, RestartsAndRollbacksAreTextEvents) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r =
      RunPsformer(std::string("train ") + kJob +
                  " --set training.max_steps=30 --set fault.kill=worker:0@12,server:0@25 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  r = CheckEvents("metrics", run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(MatchedScalars(r.output), 6 * 11 + 3 * 4) << r.output;
  r = CheckEvents("dump", run + "/tensorboard");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  // The coordinator's own restart and the job's rollback, from the coordinator. The worker is
  // killed after it pushed step 12; whether the server took that push in before it died decides
  // where it rejoins.
  const int64_t rejoin_note = TextStep(r.output, "events", "worker-0 restarted \\(incarnation 1\\), rejoining at step");
  EXPECT_TRUE(rejoin_note == 11 || rejoin_note == 12) << r.output;
  EXPECT_NE(r.output.find("worker-0 restarted (incarnation 1), rejoining at step " + std::to_string(rejoin_note + 1)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("text events 20 rolled back to the checkpoint of step 20"), std::string::npos) << r.output;
  // Every role's restart, from its supervisor, at the newest logged step when it died (logged
  // every 5 steps; a dead server holds the job's metrics back).
  const std::string killed = " killed by signal 9 \\(Killed\\); restarting as incarnation 1";
  const int64_t worker0 = TextStep(r.output, "events", "worker-0" + killed);
  const int64_t server0 = TextStep(r.output, "events", "pserver-0" + killed);
  EXPECT_TRUE(worker0 >= 5 && worker0 <= 12) << r.output;
  EXPECT_TRUE(server0 >= 20 && server0 <= 25) << r.output;
}

TEST(ServerEvents, ARolledBackServerSaysSoAndARestartedOneCountsItsRefusals) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kJob +
                                " --set training.max_steps=30 --set cluster.servers=2 --set fault.kill=server:0@25 "
                                "--run-dir " +
                                run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  // The server that was not killed rolled back with the job; the restarted one refused the
  // messages of the old recovery epoch until the workers rolled back.
  r = CheckEvents("dump", run + "/tensorboard/server-1");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("text events 20 pserver-1 rolled back to the checkpoint of step 20"), std::string::npos)
      << r.output;
  r = CheckEvents("dump", run + "/tensorboard/server-0");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const auto refused = DumpedScalars(r.output, "refused/other_epoch");
  ASSERT_FALSE(refused.empty()) << r.output;
  EXPECT_GE(refused.back().second, 1.0);
}

TEST(ServerEvents, EachServerIsARunWithItsScalarsEveryLoggingInterval) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kJob +
                                " --set training.max_steps=22 --set cluster.servers=2 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  for (const std::string server : {"server-0", "server-1"}) {
    r = CheckEvents("dump", run + "/tensorboard/" + server);
    ASSERT_EQ(r.exit_status, 0) << r.output;
    // logging.every_steps = 5, and a last point at the job's last step.
    const std::vector<int64_t> steps = {5, 10, 15, 20, 22};
    for (const std::string tag : {"server/update_ms", "server/bytes_in_per_s", "server/bytes_out_per_s",
                                  "server/pending_pulls", "server/pending_pushes"}) {
      const auto points = DumpedScalars(r.output, tag);
      std::vector<int64_t> got;
      for (const auto& [step, value] : points) {
        got.push_back(step);
        EXPECT_GE(value, 0.0) << server << " " << tag << " at step " << step;
        if (tag == "server/pending_pulls" || tag == "server/pending_pushes") {
          EXPECT_EQ(value, std::floor(value)) << server << " " << tag << " at step " << step;  // a count
        } else {
          EXPECT_GT(value, 0.0) << server << " " << tag << " at step " << step;
        }
      }
      EXPECT_EQ(got, steps) << server << " " << tag << "\n" << r.output;
    }
    // A job without faults refuses nothing.
    EXPECT_EQ(r.output.find("scalar refused/"), std::string::npos) << r.output;
  }
  // The servers' runs leave the job's scalars as they were.
  r = CheckEvents("metrics", run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
}

TEST(TrainingEvents, OffWhenTheConfigSaysSo) {
  TempDir dir;
  const std::string run = dir.File("run");
  const CommandResult r = RunPsformer(std::string("train ") + kJob +
                                      " --set training.max_steps=10 --set logging.tensorboard=false --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(fs::exists(run + "/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(run + "/tensorboard"));
}

}  // namespace
}  // namespace psformer
