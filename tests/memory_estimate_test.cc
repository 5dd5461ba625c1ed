// Sizes checked before anything starts: the closed-form parameter count agrees with the layout,
// sizes that wrap around 64 bits are refused by validation, and a job too large for a machine is
// refused with the figures (`train` and `--dry-run` as a user meets them).
#include "common/memory_estimate.h"

#include <gtest/gtest.h>

#include "common/config_loader.h"
#include "common/param_layout.h"
#include "launcher/memory_check.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::EndsSaying;
using testing::HasText;
using testing::RunPsformer;

JobConfig CopyConfig(const std::vector<std::string>& overrides = {}) {
  auto config = ResolveConfig(std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt", overrides);
  EXPECT_TRUE(config.ok()) << config.status().message();
  return *config;
}

TEST(MemoryEstimate, CountsTheParametersOfTheLayout) {
  for (const char* norm : {"POST_LN", "PRE_LN"}) {
    for (const char* layers : {"1", "3"}) {
      const JobConfig c = CopyConfig(
          {std::string("model.norm_position=") + norm, std::string("model.layers=") + layers, "model.d_ff=96"});
      auto count = CountParameters(c.model(), 37);
      ASSERT_TRUE(count.ok());
      EXPECT_EQ(*count, ParamLayout(c.model(), 37).total_size()) << norm << " " << layers;
    }
  }
}

TEST(MemoryEstimate, RolesHoldWhatTheyKeep) {
  const JobConfig c = CopyConfig({"cluster.servers=2", "cluster.workers=2"});
  auto e = EstimateMemory(c, 16);
  ASSERT_TRUE(e.ok());
  // A shard: fp32 parameters, Adam m and v, the gradient sum, and one push per worker.
  const uint64_t shard = (e->parameters + 1) / 2;
  EXPECT_EQ(e->server_bytes, shard * 16 + 2 * shard * 4);
  EXPECT_EQ(e->worker_bytes, e->worker_host_bytes + e->worker_compute_bytes);
  EXPECT_EQ(e->worker_host_bytes, e->parameters * 8);
  EXPECT_GT(e->worker_activation_bytes, 0u);
  // --local computes the whole step: more activations than one of two workers.
  EXPECT_GT(e->local_bytes - e->parameters * 16, e->worker_activation_bytes);
}

TEST(MemoryEstimate, SizesThatWrapAroundAreRefusedByValidation) {
  auto huge = ResolveConfig(std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt",
                            {"model.d_model=1000000000", "model.heads=1", "model.layers=1000000000"});
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(HasText(huge.status().message(), "would not fit in 64 bits")) << huge.status().message();
  EXPECT_TRUE(HasText(huge.status().message(), "model.d_model = 1000000000")) << huge.status().message();
}

TEST(MemoryCheck, RefusesWhatDoesNotFitTheMachineWithTheFigures) {
  const JobConfig c = CopyConfig({"cluster.servers=1", "cluster.workers=2"});
  auto e = EstimateMemory(c, 16);
  ASSERT_TRUE(e.ok());
  MachineMemory big;
  big.host_bytes = uint64_t{1} << 40;
  EXPECT_TRUE(CheckMemoryFits(c, *e, JobPlacement::kSingleNode, big).ok());
  MachineMemory small;
  small.host_bytes = e->server_bytes + e->worker_bytes;  // one worker short
  const Status refused = CheckMemoryFits(c, *e, JobPlacement::kSingleNode, small);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(HasText(refused.message(), "1 server(s) of " + FormatBytes(e->server_bytes))) << refused.message();
  EXPECT_TRUE(HasText(refused.message(), "2 worker(s) of " + FormatBytes(e->worker_bytes))) << refused.message();
  EXPECT_TRUE(HasText(refused.message(), "this machine has " + FormatBytes(small.host_bytes))) << refused.message();
}

TEST(MemoryCheck, AGpuWorkerMustFitItsGpu) {
  const JobConfig c = CopyConfig({"cluster.backend=CUDA"});
  auto e = EstimateMemory(c, 16);
  ASSERT_TRUE(e.ok());
  MachineMemory machine;
  machine.host_bytes = uint64_t{1} << 40;
  machine.gpus = 1;
  machine.gpu_bytes = e->worker_compute_bytes - 1;
  const Status refused = CheckMemoryFits(c, *e, JobPlacement::kSingleNode, machine);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(HasText(refused.message(), "does not fit the GPU")) << refused.message();
  machine.gpu_bytes = e->worker_compute_bytes;
  EXPECT_TRUE(CheckMemoryFits(c, *e, JobPlacement::kSingleNode, machine).ok());
}

// An emulated worker (a GPU stand-in) holds no model and no activations: only the pulled
// parameters and the gradient, so the base model's 8 emulated workers fit a machine of tens of GB.
TEST(MemoryCheck, AnEmulatedWorkerHoldsOnlyItsBuffers) {
  const JobConfig c = CopyConfig({"cluster.servers=1", "cluster.workers=2", "cluster.backend=EMULATED"});
  auto e = EstimateMemory(c, 16);
  ASSERT_TRUE(e.ok());
  ASSERT_LT(e->worker_host_bytes, e->worker_bytes);
  MachineMemory machine;
  machine.host_bytes = e->server_bytes + 2 * e->worker_host_bytes;
  EXPECT_TRUE(CheckMemoryFits(c, *e, JobPlacement::kSingleNode, machine).ok());
  machine.host_bytes -= 1;
  const Status refused = CheckMemoryFits(c, *e, JobPlacement::kSingleNode, machine);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(HasText(refused.message(), "2 worker(s) of " + FormatBytes(e->worker_host_bytes))) << refused.message();
}

TEST(MemoryEstimate, FormatsBytesForPeople) {
  EXPECT_EQ(FormatBytes(512), "512 bytes");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 40), "3.0 TiB");
  EXPECT_EQ(FormatBytes(uint64_t{200} << 20), "200 MiB");
}

TEST(MemoryCommand, TrainRefusesAModelTooLargeForThisMachineBeforeStartingAnything) {
  testing::TempDir dir;
  const std::string run = dir.File("run");
  const auto r = RunPsformer(
      "train --config configs/copy.pbtxt --set model.d_model=65536 --set model.d_ff=262144 "
      "--run-dir " +
      run);
  EXPECT_TRUE(EndsSaying(r, 1, "does not fit this machine"));
  EXPECT_TRUE(HasText(r.output, "TiB")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "a refused job must leave nothing behind";
}

TEST(MemoryCommand, DryRunPrintsTheFigures) {
  const auto r = RunPsformer("train --config configs/copy.pbtxt --dry-run");
  EXPECT_EQ(r.exit_status, 0) << r.output;
  auto e = EstimateMemory(CopyConfig(), 16);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(HasText(r.output, "# parameters: " + std::to_string(e->parameters) + "\n")) << r.output;
  EXPECT_TRUE(HasText(r.output, "a server shard " + FormatBytes(e->server_bytes))) << r.output;
  const auto big = RunPsformer("train --config configs/copy.pbtxt --set model.d_model=65536 --dry-run");
  EXPECT_TRUE(EndsSaying(big, 0, "warning: the job does not fit this machine"));
}

TEST(MemoryCommand, ParameterCountThatWrapsAroundIsAClearError) {
  const auto r = RunPsformer(
      "train --config configs/copy.pbtxt --set model.d_model=1000000000 --set model.heads=1 "
      "--set model.layers=1000000000 --dry-run");
  EXPECT_TRUE(EndsSaying(r, 1, "would not fit in 64 bits"));
  EXPECT_LT(r.exit_status, 128) << r.output;
}

}  // namespace
}  // namespace psformer
