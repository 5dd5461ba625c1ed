// Same-host shared memory in whole training jobs: a single-node `psformer train` moves its
// payloads through shared memory by default, ends with the weights of the same job over TCP
// (cluster.same_host_shm = false), bitwise, and leaves nothing of the job in /dev/shm, whether
// it ended cleanly or its worker and server were SIGKILLed on the way (the supervisor removes a
// killed child's segments).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::CommandResult;
using testing::ModelDigest;
using testing::ReadRunLogs;
using testing::RunPsformer;
using testing::TempDir;

const char* kJob =
    "--config configs/copy.pbtxt --set training.max_steps=40 --set training.valid_every=20 "
    "--set logging.every_steps=10 --set checkpoint.every_steps=10 --set cluster.workers=2 "
    "--set cluster.servers=2 --set cluster.retry_ms=300";

struct Outcome {
  std::string digest;
  std::string logs;
};

Outcome Train(const TempDir& dir, const std::string& name, const std::string& extra) {
  const std::string run = dir.File(name);
  const CommandResult r = RunPsformer(std::string("train ") + kJob + " --run-dir " + run + " " + extra);
  EXPECT_EQ(r.exit_status, 0) << r.output;
  return {ModelDigest(run + "/model.bin"), ReadRunLogs(run)};
}

// The job's segment prefix as the supervisor logged it ("/psformer-<hex>-"), "" if not logged.
std::string JobPrefix(const std::string& logs) {
  std::smatch m;
  static const std::regex kPrefix("shared memory: /dev/shm(/psformer-[0-9a-f]{16}-)\\*");
  return std::regex_search(logs, m, kPrefix) ? m[1].str() : "";
}

// Segments of the job still in /dev/shm.
std::vector<std::string> Leftovers(const std::string& prefix) {
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = "/" + e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) left.push_back(name);
  }
  return left;
}

// Frames the roles sent through shared memory, summed over their "N payload frame(s) sent" lines.
int FramesThroughSharedMemory(const std::string& logs) {
  static const std::regex kLine("(\\d+) payload frame\\(s\\) sent through shared memory");
  int total = 0;
  for (std::sregex_iterator it(logs.begin(), logs.end(), kLine), end; it != end; ++it) total += std::stoi((*it)[1]);
  return total;
}

TEST(ShmJob, CleanAndKilledRunsUseSharedMemoryLeaveNothingAndMatchTcp) {
  TempDir dir;
  const Outcome tcp = Train(dir, "tcp", "--set cluster.same_host_shm=false");
  EXPECT_EQ(FramesThroughSharedMemory(tcp.logs), 0) << tcp.logs;
  EXPECT_EQ(JobPrefix(tcp.logs), "");
  ASSERT_FALSE(tcp.digest.empty());

  const Outcome shm = Train(dir, "shm", "");
  EXPECT_EQ(shm.digest, tcp.digest);
  EXPECT_GT(FramesThroughSharedMemory(shm.logs), 0) << shm.logs;
  EXPECT_TRUE(testing::HasText(shm.logs, "/ipc/pserver-0.sock")) << shm.logs;
  const std::string prefix = JobPrefix(shm.logs);
  ASSERT_FALSE(prefix.empty()) << shm.logs;
  EXPECT_TRUE(Leftovers(prefix).empty());

  const Outcome killed = Train(dir, "killed", "--set fault.kill=worker:1@15,server:1@25");
  EXPECT_EQ(killed.digest, tcp.digest);
  EXPECT_TRUE(testing::HasText(killed.logs, "worker-1 killed by signal 9")) << killed.logs;
  EXPECT_TRUE(testing::HasText(killed.logs, "pserver-1 killed by signal 9")) << killed.logs;
  EXPECT_GT(FramesThroughSharedMemory(killed.logs), 0);
  const std::string killed_prefix = JobPrefix(killed.logs);
  ASSERT_FALSE(killed_prefix.empty());
  EXPECT_TRUE(Leftovers(killed_prefix).empty());
}

}  // namespace
}  // namespace psformer
