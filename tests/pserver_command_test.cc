// `psformer pserver` as a process: serves its shard initialised exactly as InitParamRange fills
// the whole vector, stops on SHUTDOWN with exit status 0, and rejects bad command lines.
#include <thread>

#include "common/config_loader.h"
#include "common/param_init.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

TEST(PserverCommand, ServesInitialShardsAndShutsDownCleanly) {
  TempDir dir;
  auto config = ResolveConfig(std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt", {"cluster.servers=2"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const std::string config_path = dir.Write("config.pbtxt", ConfigToText(*config));
  std::vector<std::string> endpoints;
  std::vector<std::thread> processes;
  std::vector<CommandResult> results(2);
  for (int k = 0; k < 2; ++k) {
    endpoints.push_back("ipc://" + dir.File("shard" + std::to_string(k) + ".sock"));
    const std::string args = "pserver --config " + config_path + " --run-dir " + dir.path().string() + " --index " +
                             std::to_string(k) + " --endpoint " + endpoints.back() + " --job-id " +
                             std::to_string(kJobId);
    processes.emplace_back([&results, k, args] { results[k] = RunPsformer(args); });
  }
  const ParamLayout layout(config->model(), ResolvedVocabSize(*config));
  const uint64_t n = layout.total_size();
  PsClientOptions o;
  o.job_id = kJobId;
  o.role = proto::COORDINATOR;
  o.servers = endpoints;
  o.parameter_count = n;
  o.pieces = std::make_shared<const PieceTable>(JobPieceTable(*config, n, layout.LayerStarts()));  // as the servers
  o.timeout_ms = 30000;
  auto client = PsClient::Create(o);
  ASSERT_TRUE(client.ok());
  std::vector<float> pulled(n), expected(n);
  auto pull = (*client)->Pull(0, pulled.data());
  ASSERT_TRUE(pull.ok());
  EXPECT_TRUE((*client)->Wait(*pull).ok());
  InitParamRange(layout, config->training().seed(), 0, n, expected.data());
  EXPECT_TRUE(BitwiseEqual(pulled, expected));
  EXPECT_TRUE((*client)->Shutdown().ok());
  for (auto& p : processes) p.join();
  for (const CommandResult& r : results) EXPECT_EQ(r.exit_status, 0) << r.output;
}

TEST(PserverCommand, RejectsBadCommandLines) {
  CommandResult r = RunPsformer("pserver --config configs/copy.pbtxt --run-dir /tmp --index 0");
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_NE(r.output.find("endpoint"), std::string::npos) << r.output;
  r = RunPsformer("pserver --config configs/copy.pbtxt --run-dir /tmp --index 0 --endpoint bogus://x");
  EXPECT_EQ(r.exit_status, 1);
  EXPECT_NE(r.output.find("cannot bind bogus://x"), std::string::npos) << r.output;
  r = RunPsformer("pserver --config /nonexistent.pbtxt --run-dir /tmp --index 0 --endpoint tcp://127.0.0.1:0");
  EXPECT_NE(r.exit_status, 0);
  EXPECT_NE(r.output.find("nonexistent.pbtxt"), std::string::npos) << r.output;
  // A run directory that is not there, or is a file: named before anything starts (an aggregator
  // parses its command line with the same code, after its config's host groups).
  for (const std::string role : {"pserver", "worker"}) {
    r = RunPsformer(role + " --config configs/copy.pbtxt --run-dir /nonexistent-run --index 0 " +
                    (role == "worker" ? "--servers tcp://127.0.0.1:9" : "--endpoint tcp://127.0.0.1:0"));
    EXPECT_EQ(r.exit_status, 2) << r.output;
    EXPECT_NE(r.output.find("--run-dir /nonexistent-run: no such directory"), std::string::npos) << r.output;
  }
  r = RunPsformer(
      "pserver --config configs/copy.pbtxt --run-dir configs/copy.pbtxt --index 0 --endpoint tcp://127.0.0.1:0");
  EXPECT_EQ(r.exit_status, 2) << r.output;
  EXPECT_NE(r.output.find("--run-dir configs/copy.pbtxt is not a directory"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace psformer::testing
