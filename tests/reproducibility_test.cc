// Where bitwise reproducibility ends (label `fault`): a BSP worker restarted on another kind of
// host computes with other CPU kernels than its first incarnation did. The job must stay correct
// (it learns the task as well) without being bitwise equal to the run that was never disturbed:
// OpenBLAS's kernels for another CPU round the matrix products differently.
// fault.restart_environment makes the restarted worker such a host on this machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::MetricValues;
using testing::ModelDigest;
using testing::ReadTextFile;
using testing::RunPsformer;
using testing::TempDir;

const char* kJob = "--config configs/copy.pbtxt --set cluster.workers=2 --set checkpoint.every_steps=0";

// The OpenBLAS kernels a worker log says it computed with, one entry per incarnation.
std::vector<std::string> KernelsInLog(const std::string& log) {
  std::vector<std::string> kernels;
  const std::regex pattern("OpenBLAS kernels ([A-Za-z0-9_]+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), pattern); it != std::sregex_iterator(); ++it) {
    kernels.push_back((*it)[1].str());
  }
  return kernels;
}

TEST(Reproducibility, WorkerRestartedWithOtherCpuKernelsStaysCorrectButNotBitwise) {
  TempDir dir;
  const std::string calm = dir.File("calm"), moved = dir.File("moved");
  auto undisturbed = RunPsformer(std::string("train ") + kJob + " --run-dir " + calm);
  ASSERT_EQ(undisturbed.exit_status, 0) << undisturbed.output;
  const std::vector<std::string> native = KernelsInLog(ReadTextFile(calm + "/logs/worker-1.log"));
  ASSERT_EQ(native.size(), 1u);
  // Any kernels but this machine's: Prescott (SSE3) runs on every x86-64 CPU, Core2 where
  // Prescott is already the native choice.
  const std::string other = native[0] == "Prescott" ? "Core2" : "Prescott";

  auto restarted = RunPsformer(std::string("train ") + kJob + " --set fault.kill=worker:1@60 " +
                               "--set fault.restart_environment=OPENBLAS_CORETYPE=" + other + " --run-dir " + moved);
  ASSERT_EQ(restarted.exit_status, 0) << restarted.output;
  const std::string log = ReadTextFile(moved + "/logs/worker-1.log");
  EXPECT_EQ(KernelsInLog(log), (std::vector<std::string>{native[0], other})) << log;
  EXPECT_NE(log.find("rejoining at step 60"), std::string::npos) << log;

  // Correct: it learns the task as the undisturbed run does (copy.pbtxt stops at 0.99).
  const std::vector<double> accuracy = MetricValues(moved + "/metrics.jsonl", "valid_accuracy");
  ASSERT_FALSE(accuracy.empty());
  EXPECT_GE(*std::max_element(accuracy.begin(), accuracy.end()), 0.99);
  // Not bitwise: the steps worker 1 computed after its restart rounded differently.
  EXPECT_NE(ModelDigest(moved + "/model.bin"), ModelDigest(calm + "/model.bin"));
}

TEST(Reproducibility, MalformedRestartEnvironmentIsAConfigError) {
  auto r = RunPsformer(std::string("train ") + kJob + " --dry-run --set fault.restart_environment=OPENBLAS_CORETYPE");
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("fault.restart_environment"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("NAME=VALUE"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace psformer
