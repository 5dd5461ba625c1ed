// `psformer average` (launcher/average_command.cc, common/checkpoint/checkpoint_average.h): the
// mean of the newest N complete checkpoints of a run directory, written as a model file; corrupt
// and incomplete checkpoints skipped; each user mistake a named error with no output file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/checkpoint/checkpoint_average.h"
#include "common/checkpoint/checkpoint_store.h"
#include "common/config_loader.h"
#include "common/model_file.h"
#include "common/param_layout.h"
#include "pserver/server/shard_checkpointer.h"
#include "pserver/wire/piece_table.h"
#include "tests/checkpoint_test_util.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using testing::EndsSaying;
using testing::ReadTextFile;
using testing::RunPsformer;

constexpr int kShards = 2;

// A run directory as psformer train leaves it: config.pbtxt (the copy model, two servers) and
// complete checkpoints at steps 10, 20 and 30 whose parameters are known.
class AverageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = ResolveConfig(std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt",
                                {"cluster.servers=" + std::to_string(kShards)});
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = *config;
    vocab_ = ResolvedVocabSize(config_);
    config_.mutable_model()->set_vocab_size(vocab_);
    run_ = dir_.File("run");
    fs::create_directories(run_);
    std::ofstream(run_ + "/config.pbtxt") << ConfigToText(config_);
    id_ = JobCheckpointIdentity(config_, vocab_);
    // The job spreads its layers over the servers: the shards hold the parameters in the
    // servers' order, and the command must put them back in the model's.
    ASSERT_TRUE(id_.spread_layers);
    const ParamLayout layout(config_.model(), vocab_);
    pieces_ = std::make_unique<PieceTable>(JobPieceTable(config_, id_.parameter_count, layout.LayerStarts()));
    for (int64_t step : {10, 20, 30}) SaveCheckpoint(step);
  }

  // Parameters that differ per step and element and are not exactly representable sums.
  std::vector<float> Params(int64_t step) const {
    std::vector<float> p(id_.parameter_count);
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(std::sin(0.37 * i + step) / (1 + step % 7));
    return p;
  }

  void SaveCheckpoint(int64_t step, int only_shard = -1) {
    const std::vector<float> model = Params(step);
    std::vector<float> p(model.size());  // in the servers' order
    for (const Piece& piece : pieces_->pieces()) {
      std::copy_n(model.begin() + piece.model_begin, piece.size(), p.begin() + piece.begin);
    }
    for (int k = 0; k < kShards; ++k) {
      if (only_shard >= 0 && k != only_shard) continue;
      const ShardRange r = ShardOf(id_.parameter_count, kShards, k);
      std::vector<float> m(r.size(), 0.5f), v(r.size(), 0.25f);
      const ShardCheckpointView view = testing::ShardViewAtStep(id_.parameter_count, k, kShards, step, /*workers=*/1,
                                                                p.data() + r.begin, m.data(), v.data());
      ASSERT_TRUE(SaveShardCheckpoint(run_, id_, view, 0).ok());
    }
  }

  std::string ShardPath(int64_t step, int shard) const {
    return (fs::path(CheckpointDir(run_, step)) / ShardFileName(shard, kShards)).string();
  }

  // The mean of `steps`' parameters, summed in double in the order given.
  std::vector<float> ExpectedMean(const std::vector<int64_t>& steps) const {
    std::vector<double> sum(id_.parameter_count, 0.0);
    for (int64_t step : steps) {
      const std::vector<float> p = Params(step);
      for (size_t i = 0; i < p.size(); ++i) sum[i] += p[i];
    }
    std::vector<float> mean(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) mean[i] = static_cast<float>(sum[i] / steps.size());
    return mean;
  }

  ModelFile ReadOutput(const std::string& path) const {
    auto model = ReadModelFile(path);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? *model : ModelFile{};
  }

  testing::TempDir dir_;
  proto::JobConfig config_;
  int vocab_ = 0;
  std::string run_;
  CheckpointIdentity id_;
  std::unique_ptr<PieceTable> pieces_;
};

TEST_F(AverageTest, OneCheckpointGivesItsWeights) {
  const std::string out = dir_.File("one.bin");
  const auto result = RunPsformer("average --run-dir " + run_ + " --last 1 --output " + out);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("steps 30)"), std::string::npos) << result.output;
  const ModelFile model = ReadOutput(out);
  EXPECT_EQ(model.vocab_size, vocab_);
  EXPECT_EQ(model.model.SerializeAsString(), config_.model().SerializeAsString());
  EXPECT_TRUE(model.params == Params(30));  // bit for bit
  const auto checksum = RunPsformer("checksum " + out);
  EXPECT_EQ(checksum.exit_status, 0) << checksum.output;
}

TEST_F(AverageTest, ProgressOnATerminalOnly) {
  const std::string arguments = "average --run-dir " + run_ + " --last 3 --output " + dir_.File("three.bin");
  const auto terminal = testing::RunPsformerInTerminal(arguments);
  ASSERT_EQ(terminal.exit_status, 0) << terminal.output;
  // The meter's last drawing, then cleared (\033[K) before the result line.
  EXPECT_NE(terminal.output.find("\raverage: 3/3 checkpoints (100%)"), std::string::npos) << terminal.output;
  EXPECT_NE(terminal.output.find("averaged 3 checkpoint(s)"), std::string::npos) << terminal.output;
  const auto piped = RunPsformer(arguments);
  ASSERT_EQ(piped.exit_status, 0) << piped.output;
  EXPECT_EQ(piped.output.find("checkpoints ("), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\r'), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\033'), std::string::npos) << piped.output;
}

TEST_F(AverageTest, ThreeCheckpointsGiveTheExactMean) {
  const std::string out = dir_.File("three.bin");
  const auto result = RunPsformer("average --run-dir " + run_ + " --last 3 --output " + out);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("averaged 3 checkpoint(s)"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("steps 10, 20, 30"), std::string::npos) << result.output;
  const std::vector<float> expected = ExpectedMean({10, 20, 30});
  EXPECT_TRUE(ReadOutput(out).params == expected);
  EXPECT_NE(expected, Params(30));  // the mean is not any one checkpoint

  auto steps = NewestCompleteCheckpoints(run_, id_, 2);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{20, 30}));  // oldest first
  auto mean = AverageCheckpoints(run_, id_, *steps);
  ASSERT_TRUE(mean.ok()) << mean.status().ToString();
  EXPECT_TRUE(pieces_->ToModelOrder(*mean) == ExpectedMean({20, 30}));  // in the servers' order
}

// `psformer average` of a run that is still training: its job writes a newer checkpoint and its
// retention (checkpoint.keep_last) removes the oldest while they are read. The newest are chosen
// again, rather than failing with "cannot open checkpoint file ...: No such file or directory".
TEST_F(AverageTest, CheckpointsReplacedWhileReadAreChosenAgain) {
  int reads = 0;
  std::vector<std::string> agains;
  auto retained = [&](size_t) {
    if (++reads != 1) return;
    SaveCheckpoint(40);  // keep_last 3: 40 written, 10 and 20 go
    SaveCheckpoint(50);
    fs::remove_all(CheckpointDir(run_, 10));
    fs::remove_all(CheckpointDir(run_, 20));
  };
  std::vector<std::vector<int64_t>> chosen;
  auto average = AverageNewestCheckpoints(
      run_, id_, 3,
      [&](const std::vector<int64_t>& steps) {
        chosen.push_back(steps);
        return Status::Ok();
      },
      retained, [&](const std::string& reason) { agains.push_back(reason); });
  ASSERT_TRUE(average.ok()) << average.status().ToString();
  EXPECT_EQ(chosen, (std::vector<std::vector<int64_t>>{{10, 20, 30}, {30, 40, 50}}));
  EXPECT_EQ(average->steps, (std::vector<int64_t>{30, 40, 50}));
  EXPECT_TRUE(pieces_->ToModelOrder(average->params) == ExpectedMean({30, 40, 50}));
  ASSERT_EQ(agains.size(), 1u);
  EXPECT_NE(agains[0].find("changed while they were read"), std::string::npos) << agains[0];

  // A shard that cannot be read where the run's checkpoints stay as they were is damage, said
  // as it is, not chosen again.
  agains.clear();
  reads = 0;
  auto damaged = AverageNewestCheckpoints(run_, id_, 2, nullptr, [&](size_t) {
    if (++reads == 1) fs::remove(ShardPath(50, 0));
  });
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find(ShardPath(50, 0)), std::string::npos) << damaged.status().ToString();
  EXPECT_TRUE(agains.empty());
}

// An average killed midway (kill -9, the OOM killer: no handler runs) leaves its unfinished
// "FILE.tmp.PID" beside --output; the next average to that output removes it.
TEST_F(AverageTest, TheUnfinishedFileOfAKilledAverageGoesWithTheNext) {
  const std::string out = dir_.File("avg.bin");
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  const std::string left = out + ".tmp." + std::to_string(child);
  std::ofstream(left) << "half a model";
  const auto result = RunPsformer("average --run-dir " + run_ + " --last 1 --output " + out);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_FALSE(fs::exists(left));
  EXPECT_TRUE(ReadOutput(out).params == Params(30));
}

TEST_F(AverageTest, DefaultCountIsTheConfigsAverageLast) {
  config_.mutable_checkpoint()->set_average_last(2);
  std::ofstream(run_ + "/config.pbtxt") << ConfigToText(config_);
  const std::string out = dir_.File("default.bin");
  const auto result = RunPsformer("average --run-dir " + run_ + " --output " + out);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("steps 20, 30)"), std::string::npos) << result.output;
  EXPECT_TRUE(ReadOutput(out).params == ExpectedMean({20, 30}));
}

TEST_F(AverageTest, CorruptAndIncompleteNewestCheckpointsAreSkipped) {
  // Step 30's second shard has a flipped byte; step 40 has only one of its two shards.
  {
    std::fstream f(ShardPath(30, 1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  SaveCheckpoint(40, 0);
  ASSERT_FALSE(fs::exists(fs::path(CheckpointDir(run_, 40)) / "manifest.pbtxt"));
  const std::string out = dir_.File("skipped.bin");
  const auto result = RunPsformer("average --run-dir " + run_ + " --last 2 --output " + out);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("skipping checkpoint at step 40"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("skipping checkpoint at step 30"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("steps 10, 20)"), std::string::npos) << result.output;
  EXPECT_TRUE(ReadOutput(out).params == ExpectedMean({10, 20}));
}

TEST_F(AverageTest, FewerCheckpointsThanAskedFailUnlessAllowed) {
  const std::string out = dir_.File("fewer.bin");
  const auto refused = RunPsformer("average --run-dir " + run_ + " --last 5 --output " + out);
  EXPECT_TRUE(EndsSaying(refused, 1, "has 3 complete checkpoint(s) (steps 10, 20, 30), fewer than the 5"));
  EXPECT_FALSE(fs::exists(out));

  const auto allowed = RunPsformer("average --run-dir " + run_ + " --last 5 --allow-fewer --output " + out);
  ASSERT_EQ(allowed.exit_status, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("averaging those"), std::string::npos) << allowed.output;
  EXPECT_TRUE(ReadOutput(out).params == ExpectedMean({10, 20, 30}));
}

TEST_F(AverageTest, MistakesAreNamedErrors) {
  const std::string out = dir_.File("model.bin");
  struct Case {
    std::string arguments;
    int exit_status;
    std::string message;
  };
  const std::string empty_run = dir_.File("empty");
  fs::create_directories(empty_run);
  std::ofstream(empty_run + "/config.pbtxt") << ConfigToText(config_);
  const std::vector<Case> cases = {
      {"--run-dir " + dir_.File("missing") + " --output " + out, 1,
       "run directory " + dir_.File("missing") + " does not exist"},
      // A regular file is no run directory, but it exists (V-12: it was said not to).
      {"--run-dir " + empty_run + "/config.pbtxt --output " + out, 1,
       "run directory " + empty_run + "/config.pbtxt is not a directory"},
      {"--run-dir " + dir_.path().string() + " --output " + out, 1, "is not a run directory"},
      {"--run-dir " + empty_run + " --output " + out, 1, "no complete checkpoint in " + empty_run},
      {"--run-dir " + run_ + " --last 0 --output " + out, 2, "--last must be at least 1"},
      {"--run-dir " + run_ + " --last three --output " + out, 2, "last"},
      {"--run-dir " + run_, 2, "output"},
      {"--run-dir " + run_ + " --output " + dir_.File("no-such-dir") + "/model.bin", 1,
       "its directory " + dir_.File("no-such-dir") + " does not exist"},
  };
  for (const Case& c : cases) {
    const auto result = RunPsformer("average " + c.arguments);
    EXPECT_EQ(result.exit_status, c.exit_status) << c.arguments << "\n" << result.output;
    EXPECT_NE(result.output.find("psformer average: error:"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(c.message), std::string::npos) << c.arguments << "\n" << result.output;
  }
  EXPECT_FALSE(fs::exists(out));
}

// checksum digests model files. A checkpoint's directory or shard file, which hold parameters
// too, is named as what it is, with the command that writes a model file of a checkpoint (K-6,
// K-7: both were "not a psformer model file (wrong magic number)").
TEST_F(AverageTest, ChecksumOfACheckpointSaysWhatItIsAndHowToMakeAModelFileOfIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fs::path(CheckpointDir(run_, 30)).string(), "a checkpoint directory"},
      {ShardPath(30, 0), "a checkpoint's shard file"},
  };
  for (const auto& [path, kind] : cases) {
    const auto result = RunPsformer("checksum " + path);
    EXPECT_EQ(result.exit_status, 1) << result.output;
    EXPECT_NE(result.output.find("psformer checksum: error: " + path + " is " + kind + ", not a model file"),
              std::string::npos)
        << result.output;
    EXPECT_NE(result.output.find("psformer average --run-dir RUN_DIR --last 1 --output FILE"), std::string::npos)
        << result.output;
  }
}

TEST_F(AverageTest, UnwritableOutputLeavesNoFile) {
  // The output names an existing directory: the rename fails and the temporary file is removed.
  const std::string out = dir_.File("taken");
  fs::create_directories(out);
  const auto result = RunPsformer("average --run-dir " + run_ + " --last 1 --output " + out);
  EXPECT_TRUE(EndsSaying(result, 1, out));
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
  EXPECT_TRUE(fs::is_empty(out));
}

TEST_F(AverageTest, ADeviceIsWrittenInPlaceAndNeverReplaced) {
  // /dev/full: every write fails, and the device must stay a device (a rename would replace it).
  const auto full = RunPsformer("average --run-dir " + run_ + " --last 1 --output /dev/full");
  EXPECT_TRUE(EndsSaying(full, 1, "cannot write /dev/full: No space left on device")) << full.output;
  struct stat st;
  ASSERT_EQ(stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // /dev/null takes the bytes: a device is written, not refused.
  const auto null = RunPsformer("average --run-dir " + run_ + " --last 1 --output /dev/null");
  EXPECT_EQ(null.exit_status, 0) << null.output;
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(AverageTest, ASymbolicLinkKeepsPointingAtItsReplacedTarget) {
  const std::string target = dir_.File("target.bin");
  const std::string link = dir_.File("link.bin");
  ASSERT_EQ(RunPsformer("average --run-dir " + run_ + " --last 3 --output " + target).exit_status, 0);
  fs::create_symlink(target, link);
  const auto result = RunPsformer("average --run-dir " + run_ + " --last 1 --output " + link);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(ReadOutput(target).params == Params(30));
}

// --output replaces an earlier model file (averaging again), but not a file of another kind nor
// the run's trained model.bin: those are refused before any checkpoint is read, and stay as they were.
TEST_F(AverageTest, ReplacesOnlyAnEarlierModelFileAndNeverTheRunsModel) {
  const std::string again = dir_.File("again.bin");
  ASSERT_EQ(RunPsformer("average --run-dir " + run_ + " --last 3 --output " + again).exit_status, 0);
  const auto second = RunPsformer("average --run-dir " + run_ + " --last 1 --output " + again);
  ASSERT_EQ(second.exit_status, 0) << second.output;
  EXPECT_TRUE(ReadOutput(again).params == Params(30));

  const std::string notes = dir_.File("notes.txt");
  std::ofstream(notes) << "a user's file, longer than a model file's magic number\n";
  EXPECT_TRUE(EndsSaying(RunPsformer("average --run-dir " + run_ + " --last 1 --output " + notes), 1,
                         "--output " + notes + " exists and is not a psformer model file"));
  EXPECT_EQ(ReadTextFile(notes), "a user's file, longer than a model file's magic number\n");

  // The run's own names, before the job has written them (still training, or stopped): refused
  // too, and nothing is created there.
  const std::string trained = (fs::path(run_) / "model.bin").string();
  ASSERT_FALSE(fs::exists(trained));
  EXPECT_TRUE(EndsSaying(RunPsformer("average --run-dir " + run_ + " --last 3 --output " + trained), 1,
                         "--output " + trained + " is the run's trained model"));
  const std::string state = (fs::path(run_) / "trainer_state.bin").string();
  EXPECT_TRUE(EndsSaying(RunPsformer("average --run-dir " + run_ + " --last 3 --output " + state), 1,
                         "is a file of the run's own (trainer_state.bin)"));
  EXPECT_FALSE(fs::exists(trained));
  EXPECT_FALSE(fs::exists(state));
  fs::copy_file(again, trained);
  const std::string before = ReadTextFile(trained);
  const std::string through = dir_.File("trained-link.bin");
  fs::create_symlink(trained, through);
  for (const std::string& out : {trained, through}) {
    EXPECT_TRUE(EndsSaying(RunPsformer("average --run-dir " + run_ + " --last 3 --output " + out), 1,
                           "--output " + out + " is the run's trained model"));
  }
  EXPECT_EQ(ReadTextFile(trained), before);

  // Nor another run's model.bin (a run directory: it holds config.pbtxt).
  const std::string other = dir_.File("other");
  fs::create_directories(other);
  std::ofstream(other + "/config.pbtxt") << "name: \"other\"\n";
  fs::copy_file(again, other + "/model.bin");
  const std::string others = ReadTextFile(other + "/model.bin");
  EXPECT_TRUE(EndsSaying(RunPsformer("average --run-dir " + run_ + " --last 1 --output " + other + "/model.bin"), 1,
                         "is the run in " + other + "'s trained model"));
  EXPECT_EQ(ReadTextFile(other + "/model.bin"), others);
}

}  // namespace
}  // namespace psformer
