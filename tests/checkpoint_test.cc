// Shard checkpoint files and checkpoint directories (common/checkpoint/): round trip, manifest
// only when every shard is present, and each corruption case falling back to the previous
// complete checkpoint.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>

#include "common/checkpoint/checkpoint_store.h"
#include "common/param_layout.h"
#include "tests/checkpoint_test_util.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kTotal = 1001;
constexpr int kShards = 3;
const CheckpointIdentity kId{kShards, kTotal, 0xabcdef};

// Values that differ per step, shard and array, so a mixed-up load shows.
struct ShardData {
  std::vector<float> p, m, v;
  ShardCheckpointView View(int shard, int64_t step) {
    const ShardRange r = ShardOf(kTotal, kShards, shard);
    p.resize(r.size());
    m.resize(r.size());
    v.resize(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      p[i] = static_cast<float>(step * 1000 + r.begin + i);
      m[i] = -p[i];
      v[i] = p[i] * 0.5f;
    }
    return testing::ShardViewAtStep(kTotal, shard, kShards, step, /*workers=*/2, p.data(), m.data(), v.data());
  }
};

void SaveAll(const std::string& run_dir, int64_t step, int keep_last = 0) {
  for (int k = 0; k < kShards; ++k) {
    ShardData d;
    ASSERT_TRUE(SaveShardCheckpoint(run_dir, kId, d.View(k, step), keep_last).ok());
  }
}

std::string ShardPath(const std::string& run_dir, int64_t step, int shard) {
  return (fs::path(CheckpointDir(run_dir, step)) / ShardFileName(shard, kShards)).string();
}

int64_t LoadedStep(const std::string& run_dir, int shard) {
  auto loaded = LoadNewestShardCheckpoint(run_dir, kId, shard);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  if (!loaded.ok() || !loaded->has_value()) return -1;
  return (*loaded)->step;
}

TEST(ShardFile, RoundTripIsExact) {
  testing::TempDir dir;
  ShardData d;
  ShardCheckpointView view = d.View(1, 7);
  ASSERT_TRUE(WriteShardFile(dir.File("s.bin"), view).ok());
  auto back = ReadShardFile(dir.File("s.bin"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->shard, 1);
  EXPECT_EQ(back->step, 7);
  EXPECT_EQ(back->updates, 7u);
  EXPECT_EQ(back->begin, view.begin);
  EXPECT_EQ(back->worker_steps, view.worker_steps);
  EXPECT_EQ(back->params, d.p);
  EXPECT_EQ(back->m, d.m);
  EXPECT_EQ(back->v, d.v);
  // No temporary file is left beside it.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(ShardFile, DetectsTruncationAndFlippedBytes) {
  testing::TempDir dir;
  ShardData d;
  ASSERT_TRUE(WriteShardFile(dir.File("s.bin"), d.View(0, 3)).ok());
  const auto size = fs::file_size(dir.File("s.bin"));
  fs::copy_file(dir.File("s.bin"), dir.File("t.bin"));
  fs::resize_file(dir.File("t.bin"), size - 10);
  EXPECT_TRUE(ReadShardFile(dir.File("t.bin")).status().IsCorruption());
  {
    std::fstream f(dir.File("s.bin"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  EXPECT_TRUE(ReadShardFile(dir.File("s.bin")).status().IsCorruption());
  EXPECT_TRUE(ReadShardFile(dir.File("missing.bin")).status().IsNotFound());
}

TEST(CheckpointStore, ManifestOnlyWhenEveryShardIsWritten) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  ShardData d;
  ASSERT_TRUE(SaveShardCheckpoint(run, kId, d.View(0, 5), 0).ok());
  ASSERT_TRUE(SaveShardCheckpoint(run, kId, d.View(2, 5), 0).ok());
  EXPECT_FALSE(fs::exists(fs::path(CheckpointDir(run, 5)) / "manifest.pbtxt"));
  EXPECT_TRUE(VerifyCheckpoint(run, 5, kId).IsNotFound());
  EXPECT_EQ(LoadedStep(run, 0), -1);  // an incomplete checkpoint is never used.
  ASSERT_TRUE(SaveShardCheckpoint(run, kId, d.View(1, 5), 0).ok());
  EXPECT_TRUE(VerifyCheckpoint(run, 5, kId).ok());
  auto loaded = LoadNewestShardCheckpoint(run, kId, 1);
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  ShardData expect;
  expect.View(1, 5);
  EXPECT_EQ((*loaded)->params, expect.p);
}

TEST(CheckpointStore, FallsBackPastTruncatedFlippedAndManifestlessCheckpoints) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  for (int64_t step : {10, 20, 30, 40}) SaveAll(run, step);
  EXPECT_EQ(LoadedStep(run, 0), 40);
  // 40: a flipped byte in another shard's file. Every shard must fall back, not only shard 2.
  {
    std::fstream f(ShardPath(run, 40, 2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x01');
  }
  EXPECT_EQ(LoadedStep(run, 0), 30);
  // The cheap check (sizes, not CRCs) does not read the files, so it passes a flipped byte.
  EXPECT_TRUE(CheckCheckpointFiles(run, 40).ok());
  // 30: truncated.
  fs::resize_file(ShardPath(run, 30, 1), fs::file_size(ShardPath(run, 30, 1)) / 2);
  EXPECT_EQ(LoadedStep(run, 0), 20);
  const Status cut = CheckCheckpointFiles(run, 30);
  EXPECT_TRUE(cut.IsCorruption()) << cut.ToString();
  EXPECT_NE(cut.message().find(ShardPath(run, 30, 1) + " has "), std::string::npos) << cut.ToString();
  fs::remove(ShardPath(run, 30, 1));
  EXPECT_NE(CheckCheckpointFiles(run, 30).message().find("missing " + ShardFileName(1, kShards)), std::string::npos);
  // 20: manifest missing.
  fs::remove(fs::path(CheckpointDir(run, 20)) / "manifest.pbtxt");
  EXPECT_TRUE(CheckCheckpointFiles(run, 20).IsNotFound());
  EXPECT_EQ(LoadedStep(run, 2), 10);
  EXPECT_EQ(LoadedStep(run, 1), 10);
  EXPECT_TRUE(CheckCheckpointFiles(run, 10).ok());
}

// A manifest that does not parse is named with the parser's line and column, and protobuf's own
// "[libprotobuf ERROR ...]" line (which named no file) no longer reaches the console.
TEST(CheckpointStore, AManifestThatDoesNotParseIsNamedWithWhereAndWhy) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  SaveAll(run, 10);
  SaveAll(run, 20);
  const std::string manifest = (fs::path(CheckpointDir(run, 20)) / "manifest.pbtxt").string();
  std::ofstream(manifest, std::ios::trunc) << "step: banana\n";
  ::testing::internal::CaptureStderr();
  const Status verified = VerifyCheckpoint(run, 20, kId);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(verified.IsCorruption()) << verified.ToString();
  EXPECT_EQ(verified.message(), "manifest " + manifest + " does not parse (1:7: Expected integer, got: banana)");
  EXPECT_EQ(logged.find("libprotobuf"), std::string::npos) << logged;
  EXPECT_EQ(LoadedStep(run, 0), 10);
}

TEST(CheckpointStore, RefusesAnotherModelsCheckpoint) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  SaveAll(run, 10);
  CheckpointIdentity other = kId;
  other.config_digest = 1;
  EXPECT_TRUE(LoadNewestShardCheckpoint(run, other, 0).status().IsInvalidArgument());
}

// The same numbers mean other parameters when the shards hold spread layers: a checkpoint is
// loaded only with the layout it was written with, and the error names the setting.
TEST(CheckpointStore, RefusesACheckpointOfTheOtherShardLayout) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  SaveAll(run, 10);
  CheckpointIdentity spread = kId;
  spread.spread_layers = true;
  const auto loaded = LoadNewestShardCheckpoint(run, spread, 0);
  ASSERT_TRUE(loaded.status().IsInvalidArgument()) << loaded.status().ToString();
  EXPECT_NE(loaded.status().message().find("cluster.spread_layers"), std::string::npos) << loaded.status().message();
  // Written spread, it loads spread.
  testing::TempDir other;
  for (int k = 0; k < kId.shards; ++k) {
    ShardData d;
    ASSERT_TRUE(SaveShardCheckpoint(other.path().string(), spread, d.View(k, 10), 0).ok());
  }
  EXPECT_TRUE(VerifyCheckpoint(other.path().string(), 10, spread).ok());
  EXPECT_TRUE(VerifyCheckpoint(other.path().string(), 10, kId).IsInvalidArgument());
}

TEST(CheckpointStore, KeepsOnlyTheNewestCompleteCheckpoints) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  for (int64_t step : {1, 2, 3, 4}) SaveAll(run, step, /*keep_last=*/2);
  EXPECT_EQ(ListCheckpointSteps(run), (std::vector<int64_t>{4, 3}));
}

// Pruning removes what a checkpoint writes, not what a user put in its directory (notes, an
// export named after the step): that stays, with its directory.
TEST(CheckpointStore, PruningLeavesAUsersFilesInAnOldCheckpointsDirectory) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  SaveAll(run, 1, /*keep_last=*/2);
  const std::string step1 = CheckpointDir(run, 1);
  std::ofstream(step1 + "/notes.txt") << "mine\n";
  std::filesystem::create_directories(step1 + "/hf");
  std::ofstream(step1 + "/shard-0000-of-0003.bin.tmp-77") << "half";  // a shard a killed job left
  for (int64_t step : {2, 3, 4}) SaveAll(run, step, /*keep_last=*/2);
  EXPECT_EQ(testing::ReadTextFile(step1 + "/notes.txt"), "mine\n");
  EXPECT_TRUE(std::filesystem::is_directory(step1 + "/hf"));
  EXPECT_FALSE(std::filesystem::exists(step1 + "/manifest.pbtxt"));
  EXPECT_FALSE(std::filesystem::exists(step1 + "/" + ShardFileName(0, kShards)));
  EXPECT_FALSE(std::filesystem::exists(step1 + "/shard-0000-of-0003.bin.tmp-77"));
  EXPECT_FALSE(std::filesystem::exists(CheckpointDir(run, 2)));
  EXPECT_FALSE(CheckCheckpointFiles(run, 1).ok());  // no checkpoint any more, only the user's files
}

TEST(CheckpointStore, CheckpointFileNamesAreTheManifestAndShardsFinishedOrNot) {
  for (const char* name :
       {"manifest.pbtxt", "shard-0000-of-0001.bin", "shard-0003-of-0008.bin.tmp-4242", "manifest.pbtxt.tmp-1"}) {
    EXPECT_TRUE(IsCheckpointFileName(name)) << name;
  }
  for (const char* name : {"notes.txt", "model.bin", "shard-0000-of-0001.bin.bak", "manifest.pbtxt.tmp-", "hf",
                           "shard-0000-of-0001.bin.tmp-12x"}) {
    EXPECT_FALSE(IsCheckpointFileName(name)) << name;
  }
}

TEST(CheckpointStore, ReportsAnUnwritableDirectory) {
  testing::TempDir dir;
  const std::string blocker = dir.Write("file", "x");  // a file where a directory must go.
  ShardData d;
  Status s = SaveShardCheckpoint(blocker, kId, d.View(0, 1), 0);
  EXPECT_TRUE(s.IsIoError()) << s.ToString();
  EXPECT_NE(s.message().find("checkpoint"), std::string::npos) << s.message();
}

// SaveShardCheckpoint of `shard` at `step` on a disk that is full, simulated with RLIMIT_FSIZE
// (writes past the limit fail with EFBIG, as they fail with ENOSPC on a full disk): 2,000 bytes,
// less than one shard file of these tests (~4 KB). The limit is lifted before it returns.
Status SaveOnAFullDisk(const std::string& run, int shard, int64_t step) {
  rlimit old;
  if (getrlimit(RLIMIT_FSIZE, &old) != 0) {
    ADD_FAILURE() << "getrlimit failed";
    return Status::Ok();
  }
  signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 2000;
  if (setrlimit(RLIMIT_FSIZE, &small) != 0) {
    ADD_FAILURE() << "setrlimit failed";
    return Status::Ok();
  }
  ShardData d;
  const Status s = SaveShardCheckpoint(run, kId, d.View(shard, step), 0);
  EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  return s;
}

// On a full disk the save fails with a clear error, leaves no partial file, and the previous
// complete checkpoint still loads.
TEST(CheckpointStore, FullDiskIsAClearErrorAndKeepsTheLastGoodCheckpoint) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  SaveAll(run, 1);
  const Status s = SaveOnAFullDisk(run, /*shard=*/0, /*step=*/2);
  EXPECT_TRUE(s.IsIoError()) << s.ToString();
  EXPECT_NE(s.message().find("File too large"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(ShardFileName(0, kShards)), std::string::npos) << s.message();
  // Nothing left behind, not even the step's directory: the run shows no checkpoint of step 2.
  EXPECT_FALSE(fs::exists(CheckpointDir(run, 2))) << CheckpointDir(run, 2);
  EXPECT_TRUE(VerifyCheckpoint(run, 1, kId).ok());
  for (int k = 0; k < kShards; ++k) EXPECT_EQ(LoadedStep(run, k), 1);
}

// A shard that fails where another has written keeps the other's file: the directory goes only
// when it holds nothing.
TEST(CheckpointStore, AFailedShardLeavesTheFilesOfTheOthers) {
  testing::TempDir dir;
  const std::string run = dir.path().string();
  ShardData first;
  ASSERT_TRUE(SaveShardCheckpoint(run, kId, first.View(0, 2), 0).ok());
  const Status s = SaveOnAFullDisk(run, /*shard=*/1, /*step=*/2);
  EXPECT_TRUE(s.IsIoError()) << s.ToString();
  EXPECT_TRUE(fs::exists(ShardPath(run, 2, 0)));
  EXPECT_FALSE(fs::exists(ShardPath(run, 2, 1)));
}

}  // namespace
}  // namespace psformer
