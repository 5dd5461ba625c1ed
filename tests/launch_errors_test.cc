// Launch mistakes are refused before anything starts, with a message that names what is wrong
// and where, and a non-zero exit (label `integration`): a GPU backend without a GPU, a port in
// use, a run directory too long for a socket, a hostfile naming a host that cannot be reached.
// (Too many GPU workers for a host's GPUs is cluster_plan_test; a rank count that does not match
// the config is training_test.)
#include <gtest/gtest.h>

#include "tests/held_port.h"
#include "tests/test_util.h"
#include "worker/backend/backend_factory.h"

namespace psformer {
namespace {

using testing::CommandResult;
using testing::EndsSaying;
using testing::HeldPort;
using testing::RunPsformer;
using testing::RunShell;
using testing::TempDir;

const char* kShort =
    "--config configs/copy.pbtxt --set training.max_steps=4 --set training.valid_every=0 "
    "--set logging.every_steps=2 --set checkpoint.every_steps=0";

std::string Mpirun(int ranks, const std::string& mpirun_options = "") {
  return std::string("cd ") + PSFORMER_SOURCE_DIR + " && mpirun --allow-run-as-root --oversubscribe " + mpirun_options +
         "-np " + std::to_string(ranks) + " " + PSFORMER_BINARY + " train " + kShort;
}

// A refused job's rank 0 lets go of the run directory before MPI_Finalize, for it may die at any
// time after the ranks agreed to fail: here it is killed as it calls MPI_Finalize.
std::string MpirunWhoseRank0DiesInMpiFinalize(int ranks) {
  return Mpirun(ranks, std::string("-x LD_PRELOAD=") + RANK0_DIES_IN_MPI_FINALIZE + " ");
}

TEST(LaunchErrors, CudaBackendWithoutAGpuIsRefused) {
  if (GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kShort + " --set cluster.backend=CUDA --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "psformer train: error: cluster.backend = CUDA but this machine ("));
  EXPECT_NE(r.output.find("has no GPU (CUDA device count 0"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "a refused job created its run directory";
}

TEST(LaunchErrors, CudaBackendWithoutAGpuIsRefusedUnderMpirun) {
  if (GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunShell(MpirunWhoseRank0DiesInMpiFinalize(3) +
                             " --set cluster.workers=2 --set cluster.backend=CUDA --run-dir " + run);
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("cluster.backend = CUDA but host "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("has no GPU (CUDA device count 0)"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "a refused job left its run directory";
}

TEST(LaunchErrors, ZeroWorkersOnACpuMachineMeansOneWorker) {
  if (GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU: workers 0 means one per GPU there";
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kShort + " --set cluster.workers=0 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(run + "/logs/worker-0.log"));
  EXPECT_FALSE(std::filesystem::exists(run + "/logs/worker-1.log"));
  std::ifstream in(run + "/config.pbtxt");
  const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(config.find("workers: 1\n"), std::string::npos) << config;
}

TEST(LaunchErrors, APortInUseIsNamedAndNothingStarts) {
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kShort +
                                " --set cluster.base_port=" + std::to_string(held.port()) + " --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "psformer train: error: cannot bind 127.0.0.1:" + std::to_string(held.port())));
  EXPECT_NE(r.output.find("the port is in use; choose another cluster.base_port"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "a refused job created its run directory";
}

TEST(LaunchErrors, APortInUseIsNamedUnderMpirun) {
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r =
      RunShell(Mpirun(3) + " --set cluster.workers=2 --set cluster.base_port=" + std::to_string(held.port()) +
               " --run-dir " + run);
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("(pserver-0 on "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot bind 127.0.0.1:" + std::to_string(held.port())), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the port is in use"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "a refused job left its run directory";
}

// A run directory whose path does not fit the aggregator's Unix socket is refused before any
// rank writes it: `psformer launch` restarts a job that got as far as its run directory, and this
// one would be refused again. Rank 0, which took the directory's lock, dies in MPI_Finalize.
TEST(LaunchErrors, ARunDirTooLongForTheAggregatorsSocketIsRefusedBeforeItIsWritten) {
  TempDir dir;
  const std::string run = dir.File("run-" + std::string(110, 'x'));
  CommandResult r = RunShell(MpirunWhoseRank0DiesInMpiFinalize(3) +
                             " --set cluster.workers=2 --set cluster.host_groups=1,1 --run-dir " + run);
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("the run directory's path is too long for the Unix socket of host group 0's aggregator"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "a refused job created its run directory";
}

// mpirun starts its daemons over ssh before any psformer process exists, so the message is
// Open MPI's (with ssh's line naming the host); docs/launching.md says so.
TEST(LaunchErrors, AnUnreachableHostInTheHostfileFailsNamingTheHost) {
  TempDir dir;
  const std::string hostfile = dir.Write("hosts", "psformer-no-such-host slots=3\n");
  CommandResult r = RunShell(std::string("cd ") + PSFORMER_SOURCE_DIR +
                             " && mpirun --allow-run-as-root --mca plm_rsh_args '-o ConnectTimeout=10 -o BatchMode=yes'"
                             " --hostfile " +
                             hostfile + " -np 3 " + PSFORMER_BINARY + " train " + kShort +
                             " --set cluster.workers=2 --run-dir " + dir.File("run"));
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("psformer-no-such-host"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("run")));
}

}  // namespace
}  // namespace psformer
