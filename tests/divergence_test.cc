// A training that diverges (the loss is no longer finite) stops once with the step and the cause:
// a restart or a rollback would compute from the same weights and diverge again.
#include <gtest/gtest.h>

#include <string>

#include "tests/test_util.h"

namespace psformer::testing {
namespace {

// A learning rate 1e30 times the paper's: the weights overflow within a few steps.
const char* kDiverging =
    "train --config configs/copy.pbtxt --set schedule.scale=1e30 --set training.max_steps=200 "
    "--set logging.every_steps=5 --set training.valid_every=0 --set training.stop_at_valid_accuracy=0";

TEST(Divergence, ANonFiniteLossStopsTheJobOnceWithoutRestarts) {
  TempDir dir;
  const std::string run = dir.File("run");
  const CommandResult r = RunPsformer(std::string(kDiverging) + " --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "the loss is not finite at step ")) << r.output;
  EXPECT_TRUE(HasText(r.output, "not restarted")) << r.output;
  const std::string supervisor = ReadTextFile(run + "/logs/supervisor.log");
  EXPECT_FALSE(HasText(supervisor, "restarting in")) << supervisor;
  EXPECT_FALSE(std::filesystem::exists(run + "/model.bin"));
}

TEST(Divergence, TheLocalTrainerStopsTheSameWay) {
  TempDir dir;
  const CommandResult r = RunPsformer(std::string(kDiverging) + " --local --run-dir " + dir.File("run"));
  EXPECT_TRUE(EndsSaying(r, 1, "the loss is not finite at step ")) << r.output;
}

}  // namespace
}  // namespace psformer::testing
