// `psformer pserver` with the job's CURVE keys in its environment (as its supervisor starts it):
// clients without the job's client key get no answer, the server keeps serving, and the job's
// client pulls the initial shard and shuts the server down. Malformed keys stop the server
// before it serves, with an error naming the variable. And `psformer train` hands every role its
// keys (CURVE on in every log, no key printed anywhere) and ends with the same weights as
// with cluster.authenticate=false. Servers listen on cluster.bind_host only, and a wildcard
// bind_host (whose endpoints carry the host's name) works.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/config_loader.h"
#include "common/param_init.h"
#include "common/param_layout.h"
#include "common/transport/van_factory.h"
#include "common/transport/zmq_van.h"
#include "pserver/wire/wire_message.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kJob = 0xc0ffee;

// A request from the coordinator to the only shard; a PULL names the shard's whole range.
RawMessage Request(proto::MessageType type, uint64_t shard_end = 0) {
  proto::Header h = MessageHeader(type, kJob, proto::COORDINATOR, 0, 0);
  h.set_step(0);
  h.set_end(shard_end);
  return EncodeMessage("shard0", h, {});
}

// The first message `van` receives within `ms` milliseconds.
std::optional<WireMessage> Answer(Van& van, int ms) {
  for (int waited = 0; waited < ms; waited += 100) {
    auto r = van.Recv(100);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return std::nullopt;
    if (r->has_value()) {
      WireMessage msg;
      EXPECT_FALSE(ParseMessage(std::move(**r), &msg).has_value());
      return msg;
    }
  }
  return std::nullopt;
}

class PserverAuth : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = ResolveConfig(std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt", {"cluster.servers=1"});
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = *config;
    config_path_ = dir_.Write("config.pbtxt", ConfigToText(config_));
    endpoint_ = "ipc://" + dir_.File("shard0.sock");
    auto keys = GenerateCurveKeys();
    ASSERT_TRUE(keys.ok()) << keys.status().ToString();
    keys_ = *keys;
  }

  // `psformer pserver` with PSFORMER_CURVE_KEYS=`keys` in its environment, on a thread.
  void StartServer(const std::string& keys) {
    // Single quotes: Z85 has shell characters such as ( & < but no quote.
    const std::string command = "cd " + std::string(PSFORMER_SOURCE_DIR) + " && env " + kCurveKeysVariable + "='" +
                                keys + "' " + PSFORMER_BINARY + " pserver --config " + config_path_ + " --run-dir " +
                                dir_.path().string() + " --index 0 --endpoint " + endpoint_ + " --job-id " +
                                std::to_string(kJob);
    server_ = std::thread([this, command] { result_ = RunShell(command); });
  }
  void JoinServer() {
    if (server_.joinable()) server_.join();
  }
  // SHUTDOWN from `client`: ACKed, and the server exits cleanly.
  void ShutDown(Van& client) {
    ASSERT_TRUE(client.Send(Request(proto::SHUTDOWN)).ok());
    auto ack = Answer(client, 30000);
    ASSERT_TRUE(ack.has_value());
    EXPECT_EQ(ack->header.type(), proto::ACK);
    JoinServer();
    EXPECT_EQ(result_.exit_status, 0) << result_.output;
  }
  // A test that failed half-way leaves its server running: shut it down (it knows these keys).
  void TearDown() override {
    if (server_.joinable()) Client(&keys_)->Send(Request(proto::SHUTDOWN)).ok();
    JoinServer();
  }

  // A client that is not of the job: its Send may fail (refused, nothing to queue to) but never
  // blocks for long.
  std::unique_ptr<Van> Foreign(const CurveKeys* keys) {
    ZmqVanOptions o;
    if (keys != nullptr) o.curve = *keys;
    o.linger_ms = 0;
    o.send_timeout_ms = 1000;
    auto van = std::make_unique<ZmqVan>(o);
    EXPECT_TRUE(van->Connect("shard0", endpoint_).ok());
    return van;
  }
  std::unique_ptr<Van> Client(const CurveKeys* keys) {
    auto van = MakeClientVanWithKeys(config_, FaultStream(FaultRole::kControl, 0), keys);
    EXPECT_TRUE(van.ok()) << van.status().ToString();
    EXPECT_TRUE((*van)->Connect("shard0", endpoint_).ok());
    return std::move(*van);
  }

  TempDir dir_;
  proto::JobConfig config_;
  std::string config_path_;
  std::string endpoint_;
  CurveKeys keys_;
  std::thread server_;
  CommandResult result_;
};

TEST_F(PserverAuth, ForeignClientsGetNoAnswerAndTheJobsClientIsServed) {
  StartServer(EncodeCurveKeys(keys_.ForServer()));
  auto job_client = Client(&keys_);
  auto plain = Foreign(nullptr);
  auto other = GenerateCurveKeys();
  ASSERT_TRUE(other.ok());
  CurveKeys stranger = other->ForClient();
  stranger.server_public = keys_.server_public;  // it knows whom to call, not the job's client key.
  auto foreign = Foreign(&stranger);

  // The job's client first, so the server is known to be up when the foreign ones knock.
  ASSERT_TRUE(job_client->Send(Request(proto::HEARTBEAT)).ok());
  auto beat = Answer(*job_client, 30000);
  ASSERT_TRUE(beat.has_value()) << "the job's client got no answer";
  EXPECT_EQ(beat->header.type(), proto::HEARTBEAT);

  plain->Send(Request(proto::SHUTDOWN)).ok();
  foreign->Send(Request(proto::SHUTDOWN)).ok();
  EXPECT_FALSE(Answer(*plain, 2000).has_value()) << "a client without keys was answered";
  EXPECT_FALSE(Answer(*foreign, 500).has_value()) << "a client with another job's keys was answered";

  // Still serving the job: the whole initial shard, as InitParamRange makes it.
  const ParamLayout layout(config_.model(), ResolvedVocabSize(config_));
  ASSERT_TRUE(job_client->Send(Request(proto::PULL, layout.total_size())).ok());
  auto params = Answer(*job_client, 30000);
  ASSERT_TRUE(params.has_value());
  ASSERT_EQ(params->header.type(), proto::PARAMS) << params->header.error();
  std::vector<float> got(layout.total_size()), expected(layout.total_size());
  CopyPayloadAsFloats(*params, got.data());
  InitParamRange(layout, config_.training().seed(), 0, layout.total_size(), expected.data());
  EXPECT_EQ(got, expected);

  ASSERT_NO_FATAL_FAILURE(ShutDown(*job_client));
  EXPECT_NE(result_.output.find("CURVE on"), std::string::npos) << result_.output;
  EXPECT_NE(result_.output.find("zap: refused"), std::string::npos) << result_.output;
}

TEST_F(PserverAuth, MalformedKeysAreANamedErrorBeforeServing) {
  StartServer("not,keys,at,all");
  JoinServer();
  EXPECT_EQ(result_.exit_status, 1) << result_.output;
  EXPECT_NE(result_.output.find("PSFORMER_CURVE_KEYS"), std::string::npos) << result_.output;
}

TEST_F(PserverAuth, WithoutKeysTheServerSaysItIsUnauthenticated) {
  StartServer("");
  ASSERT_NO_FATAL_FAILURE(ShutDown(*Client(nullptr)));
  EXPECT_NE(result_.output.find("unauthenticated"), std::string::npos) << result_.output;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TrainAuth, EveryRoleRunsCurveAndTheWeightsAreThoseOfAnUnauthenticatedRun) {
  TempDir dir;
  const std::string common =
      "train --config configs/copy.pbtxt --set training.max_steps=12 --set training.valid_every=0 "
      "--set checkpoint.every_steps=0 --set cluster.workers=2 --set cluster.servers=2 --run-dir ";
  CommandResult with = RunPsformer(common + dir.File("curve"));
  ASSERT_EQ(with.exit_status, 0) << with.output;
  CommandResult without = RunPsformer(common + dir.File("plain") + " --set cluster.authenticate=false");
  ASSERT_EQ(without.exit_status, 0) << without.output;
  EXPECT_EQ(ModelDigest(dir.File("curve") + "/model.bin"), ModelDigest(dir.File("plain") + "/model.bin"));
  for (const char* role : {"pserver-0", "pserver-1", "worker-0", "worker-1"}) {
    const std::string log = ReadFile(dir.path() / "curve" / "logs" / (std::string(role) + ".log"));
    EXPECT_NE(log.find("CURVE on"), std::string::npos) << role << ":\n" << log;
    const std::string plain = ReadFile(dir.path() / "plain" / "logs" / (std::string(role) + ".log"));
    EXPECT_NE(plain.find("cluster.authenticate = false"), std::string::npos) << role << ":\n" << plain;
  }
  // The keys are never printed: no log of the run and nothing the command said holds them.
  EXPECT_EQ(with.output.find(std::string(kCurveKeysVariable) + "="), std::string::npos) << with.output;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() / "curve" / "logs")) {
    const std::string log = ReadFile(entry.path());
    EXPECT_EQ(log.find(std::string(kCurveKeysVariable) + "="), std::string::npos) << entry.path();
  }
}

TEST(TrainAuth, SealedWithAesGcmEveryRoleTrainsTheWeightsOfAnUnauthenticatedRun) {
  TempDir dir;
  const std::string common =
      "train --config configs/copy.pbtxt --set training.max_steps=12 --set training.valid_every=0 "
      "--set checkpoint.every_steps=0 --set cluster.workers=4 --set cluster.servers=2 --set cluster.host_groups=2,2 "
      "--set cluster.same_host_shm=false --run-dir ";
  CommandResult sealed = RunPsformer(common + dir.File("aes") + " --set cluster.encryption=AES_256_GCM");
  ASSERT_EQ(sealed.exit_status, 0) << sealed.output;
  CommandResult plain = RunPsformer(common + dir.File("plain") + " --set cluster.authenticate=false");
  ASSERT_EQ(plain.exit_status, 0) << plain.output;
  EXPECT_EQ(ModelDigest(dir.File("aes") + "/model.bin"), ModelDigest(dir.File("plain") + "/model.bin"));
  for (const char* role : {"pserver-0", "pserver-1", "worker-0", "worker-3", "aggregator-1"}) {
    const std::string log = ReadFile(dir.path() / "aes" / "logs" / (std::string(role) + ".log"));
    EXPECT_NE(log.find("sealed with AES-256-GCM"), std::string::npos) << role << ":\n" << log;
    EXPECT_EQ(log.find("CURVE on"), std::string::npos) << role << ":\n" << log;
    if (std::string(role).rfind("worker", 0) != 0) {
      EXPECT_NE(log.find("refused messages: none"), std::string::npos) << role << ":\n" << log;
    }
  }
}

TEST(BindHost, ServersListenWhereBindHostSays) {
  proto::JobConfig config;
  FillDefaults(&config);
  // The default, 127.0.0.1, and any address: bound as the launcher names it.
  EXPECT_EQ(ServerBindEndpoint(config, "tcp://127.0.0.1:5000"), "tcp://127.0.0.1:5000");
  EXPECT_EQ(ServerBindEndpoint(config, "ipc:///tmp/x.sock"), "ipc:///tmp/x.sock");
  config.mutable_cluster()->set_bind_host("10.1.2.3");
  EXPECT_EQ(ServerBindEndpoint(config, "tcp://10.1.2.3:5000"), "tcp://10.1.2.3:5000");
  // A wildcard: the endpoint names the host, the server listens on every interface.
  config.mutable_cluster()->set_bind_host("0.0.0.0");
  EXPECT_EQ(ServerBindEndpoint(config, "tcp://node0:5000"), "tcp://*:5000");
  EXPECT_EQ(ServerBindEndpoint(config, "tcp://10.1.2.3:5000"), "tcp://10.1.2.3:5000");
  EXPECT_EQ(ServerBindEndpoint(config, "tcp://[::1]:5000"), "tcp://[::1]:5000");
}

TEST(BindHost, AJobWithAWildcardBindHostTrains) {
  TempDir dir;
  CommandResult r = RunPsformer(
      "train --config configs/copy.pbtxt --set training.max_steps=4 --set training.valid_every=0 "
      "--set checkpoint.every_steps=0 --set cluster.max_restarts=0 --set cluster.bind_host=0.0.0.0 --run-dir " +
      dir.File("run"));
  ASSERT_EQ(r.exit_status, 0) << r.output << ReadFile(dir.path() / "run" / "logs" / "pserver-0.log");
  const std::string log = ReadFile(dir.path() / "run" / "logs" / "pserver-0.log");
  EXPECT_NE(log.find("serving at tcp://0.0.0.0:"), std::string::npos) << log;
}

}  // namespace
}  // namespace psformer::testing
