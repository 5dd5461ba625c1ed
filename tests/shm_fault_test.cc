// Faults on the same-host path, in whole `psformer train` jobs (label `fault`): a worker killed
// halfway through copying a payload into its segment, a server killed while a worker reads its
// reply out of the server's segment, and restarts with shared memory on. Each run must end by
// itself with the weights of the undisturbed run, bitwise; the restarted role must come back on
// segments of its own (named by its new pid) while the supervisor removed those of the killed
// pid; and /dev/shm must hold nothing of the job afterwards.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::CommandResult;
using testing::HasText;
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

// Every match of `pattern`'s first group in `logs`.
std::vector<std::string> All(const std::string& logs, const std::string& pattern) {
  std::vector<std::string> found;
  const std::regex re(pattern);
  for (std::sregex_iterator it(logs.begin(), logs.end(), re), end; it != end; ++it) found.push_back((*it)[1]);
  return found;
}

// The job's segment prefix as the supervisor logged it ("/psformer-<hex>-"), "" if not logged.
std::string JobPrefix(const std::string& logs) {
  const auto found = All(logs, "shared memory: /dev/shm(/psformer-[0-9a-f]{16}-)\\*");
  return found.empty() ? "" : found.front();
}

std::vector<std::string> Leftovers(const std::string& prefix) {
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = "/" + e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) left.push_back(name);
  }
  return left;
}

// `role` (e.g. "worker-1") was killed and came back on shared memory of its own: the killed pid's
// segments were removed, and the pid of its restart made a segment and sent payloads through it.
void ExpectReattached(const std::string& logs, const std::string& role, const std::string& prefix) {
  const auto pids = All(logs, role + ": started pid (\\d+) \\(incarnation");
  ASSERT_EQ(pids.size(), 2u) << role << "\n" << logs;
  EXPECT_TRUE(HasText(logs, role + " killed by signal 9")) << logs;
  EXPECT_TRUE(std::regex_search(logs, std::regex(role + ": removed [1-9]\\d* shared-memory segment\\(s\\) of pid " +
                                                 pids[0])))
      << role << "\n" << logs;
  EXPECT_TRUE(HasText(logs, "made shared-memory segment " + prefix + pids[1] + "-")) << role << "\n" << logs;
  // The restart's own log line (its ShmVan's summary when it ends) counts what it sent.
  const auto sent = All(logs, role + " shm_van\\.cc:\\d+\\] transport: (\\d+) payload frame\\(s\\) sent through shared");
  ASSERT_FALSE(sent.empty()) << logs;
  EXPECT_GT(std::stoi(sent.back()), 0) << logs;
}

struct ShmFaultCase {
  const char* flags;
  std::vector<const char*> killed;  // roles killed once, each restarted
  std::vector<const char*> logged;
};

TEST(ShmFault, KilledInTheCopyOrWhileAReplyIsReadEndsWithTheUndisturbedWeightsAndLeavesNothing) {
  TempDir dir;
  const Outcome calm = Train(dir, "calm", "");
  ASSERT_FALSE(calm.digest.empty());
  EXPECT_FALSE(HasText(calm.logs, "fault injection")) << calm.logs;

  const ShmFaultCase cases[] = {
      // The payload half written into the slot never got a descriptor: no server saw it.
      {"--set fault.kill=worker:1@15:shm",
       {"worker-1"},
       {"halfway through copying a payload of", "push of step 15", "rejoining at step 15"}},
      // Without overlap the push of step 15 goes out after the whole step is computed.
      {"--set fault.kill=worker:0@15:shm --set cluster.overlap=false",
       {"worker-0"},
       {"halfway through copying a payload of", "push of step 15"}},
      // The worker reading holds the mapping, which outlives the unlink; the job rolls back.
      {"--set fault.kill=server:0@25:shm",
       {"pserver-0"},
       {"while a receiver reads my reply from shared memory (sent after step 25)", "the job rolls back to step 20"}},
      // Plain kills of both kinds of role with shared memory on.
      {"--set fault.kill=worker:1@15,server:1@25", {"worker-1", "pserver-1"}, {"the job rolls back to step 20"}},
  };
  int run = 0;
  for (const ShmFaultCase& c : cases) {
    SCOPED_TRACE(c.flags);
    const Outcome faulty = Train(dir, "faulty-" + std::to_string(run++), c.flags);
    for (const char* line : c.logged) EXPECT_TRUE(HasText(faulty.logs, line)) << line << "\n" << faulty.logs;
    const std::string prefix = JobPrefix(faulty.logs);
    ASSERT_FALSE(prefix.empty()) << faulty.logs;
    for (const char* role : c.killed) ExpectReattached(faulty.logs, role, prefix);
    EXPECT_EQ(faulty.digest, calm.digest);
    EXPECT_EQ(Leftovers(prefix), std::vector<std::string>());
  }
}

TEST(ShmFault, SharedMemoryFaultWithoutSharedMemoryIsAClearError) {
  TempDir dir;
  const CommandResult r = RunPsformer(std::string("train ") + kJob + " --run-dir " + dir.File("bad") +
                                      " --set fault.kill=worker:0@5:shm --set cluster.same_host_shm=false");
  EXPECT_NE(r.exit_status, 0);
  EXPECT_TRUE(HasText(r.output, "fault.kill (worker:0@5:shm).action")) << r.output;
  EXPECT_TRUE(HasText(r.output, "needs cluster.same_host_shm = true")) << r.output;
}

}  // namespace
}  // namespace psformer
