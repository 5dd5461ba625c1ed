// The ends of a host group's aggregator's resends to the servers (pserver/aggregator/
// upstream_requests.h), as a worker's client has them (pserver_retry_test): a request no server
// answers ends Run after timeout_ms naming the server, the message and the step; a server's
// shared-memory segment refused again and again past the heartbeat timeout ends it naming the
// segment; a few refusals that stop cost only resends. Without the bounds each of the first two
// aggregators resends for ever: every test here waits at most kMostSeconds for Run to end.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pserver/aggregator/host_aggregator.h"
#include "pserver/wire/piece_table.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kTotal = 5003;
constexpr int kMostSeconds = 20;  // Run's bounds here are under 1 s of waiting; the rest is load

proto::JobConfig TwoGroupConfig() {
  proto::JobConfig config = PsConfig(2, 1, proto::ClusterConfig::BSP);
  config.mutable_cluster()->set_retry_ms(50);
  config.mutable_cluster()->set_heartbeat_timeout_ms(400);  // the segment's patience
  config.mutable_cluster()->add_host_groups(1);
  config.mutable_cluster()->add_host_groups(1);
  return config;
}

// Group 0's aggregator, run on a thread, with worker 0's client beside it.
class OneAggregator {
 public:
  OneAggregator(const proto::JobConfig& config, const std::vector<std::string>& servers, const std::string& dir,
                std::unique_ptr<Van> van, int timeout_ms) {
    HostAggregatorOptions o;
    o.config = config;
    o.parameter_count = kTotal;
    o.job_id = kJobId;
    o.servers = servers;
    o.endpoint = "ipc://" + dir + "/aggregator-0.sock";
    o.threads = 1;
    o.timeout_ms = timeout_ms;
    auto made = HostAggregator::Create(std::move(o), std::move(van));
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (!made.ok()) return;
    aggregator_ = std::move(made).value();
    run_ = std::async(std::launch::async, [a = aggregator_.get()] { return a->Run(); });
    PsClientOptions c;
    c.job_id = kJobId;
    c.servers = servers;
    c.aggregator = aggregator_->endpoint();
    c.parameter_count = kTotal;
    c.timeout_ms = 60000;
    c.retry_ms = 50;
    c.pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, {}));
    auto client = PsClient::Create(std::move(c));
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    if (client.ok()) client_ = std::move(client).value();
  }
  ~OneAggregator() {
    if (!aggregator_) return;
    aggregator_->Stop();
    if (run_.valid()) run_.wait();
  }
  bool ok() const { return aggregator_ && client_; }
  PsClient& client() { return *client_; }
  HostAggregator& aggregator() { return *aggregator_; }
  // What Run returned, or nullopt when it still runs after kMostSeconds (then it is stopped).
  std::optional<Status> RunEnds() {
    if (run_.wait_for(std::chrono::seconds(kMostSeconds)) != std::future_status::ready) return std::nullopt;
    return run_.get();
  }

 private:
  std::unique_ptr<HostAggregator> aggregator_;
  std::future<Status> run_;
  std::unique_ptr<PsClient> client_;
};

// A server that takes every message and answers none (a stopped or wedged server whose socket is
// still open). The aggregator's PULL of step 0 goes unanswered for longer than timeout_ms.
TEST(AggregatorBounds, ARequestNoServerAnswersEndsRunNamingTheServerMessageAndStep) {
  TempDir dir;
  ZmqVan silent;
  const StatusOr<std::string> endpoint = silent.Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  OneAggregator a(TwoGroupConfig(), {*endpoint}, dir.path().string(), std::make_unique<ZmqVan>(), 800);
  ASSERT_TRUE(a.ok());
  std::vector<float> params(kTotal, -1.0f);
  ASSERT_TRUE(a.client().Pull(0, params.data()).ok());
  const auto start = std::chrono::steady_clock::now();
  const std::optional<Status> ended = a.RunEnds();
  ASSERT_TRUE(ended.has_value()) << "the aggregator still resends after " << kMostSeconds << " s";
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(700));  // not before the bound
  ASSERT_FALSE(ended->ok());
  EXPECT_TRUE(ended->IsUnavailable()) << ended->ToString();
  EXPECT_NE(ended->message().find("aggregator of host group 0: no answer to PULL of step 0 (piece 0) from shard 0 "
                                  "(pserver-0) within 800 ms"),
            std::string::npos)
      << ended->ToString();
  EXPECT_FALSE(a.aggregator().gave_up_on_segment());  // restarted by its supervisor, as a worker would be
  EXPECT_GT(a.aggregator().stats().resends.load(), 0u);
}

// Every reply of the server arrives as a descriptor of a segment the aggregator cannot read: Run
// ends once the refusals have gone on past the job's heartbeat timeout (400 ms), long before
// timeout_ms (60 s), naming the segment, the last refusal and the request it waited for.
TEST(AggregatorBounds, AServersSegmentRefusedPastTheHeartbeatTimeoutEndsRunNamingIt) {
  TempDir dir;
  const proto::JobConfig config = TwoGroupConfig();
  ServerGroup servers(config, kTotal);
  OneAggregator a(config, servers.endpoints(), dir.path().string(), std::make_unique<RefusingVan>(1 << 30, "server-"),
                  60000);
  ASSERT_TRUE(a.ok());
  std::vector<float> params(kTotal, -1.0f);
  ASSERT_TRUE(a.client().Pull(0, params.data()).ok());
  const std::optional<Status> ended = a.RunEnds();
  ASSERT_TRUE(ended.has_value()) << "the aggregator still resends after " << kMostSeconds << " s";
  ASSERT_FALSE(ended->ok());
  EXPECT_TRUE(ended->IsUnavailable()) << ended->ToString();
  const std::string& m = ended->message();
  EXPECT_NE(m.find(std::string("aggregator of host group 0: shared-memory segment ") + RefusingVan::kSegment),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("heartbeat timeout (400 ms)"), std::string::npos) << m;
  EXPECT_NE(m.find("holds no payload of generation 15"), std::string::npos) << m;
  EXPECT_NE(m.find("waiting for PULL of step 0 (piece 0) from shard 0 (pserver-0)"), std::string::npos) << m;
  EXPECT_TRUE(a.aggregator().gave_up_on_segment());  // its command asks not to be restarted
  EXPECT_GE(a.aggregator().stats().rejected.Get(RejectReason::kBadSharedMemory), 3u);
}

// Three refusals in a row that stop (a server that died; its restart answers through a new
// segment) cost resends only: the worker's pull through the aggregator completes with the
// server's parameters, and the aggregator serves on.
TEST(AggregatorBounds, AFewRefusalsOfASegmentCostOnlyResends) {
  TempDir dir;
  proto::JobConfig config = TwoGroupConfig();
  config.mutable_cluster()->set_heartbeat_timeout_ms(3000);
  ServerGroup servers(config, kTotal);
  OneAggregator a(config, servers.endpoints(), dir.path().string(), std::make_unique<RefusingVan>(3, "server-"), 60000);
  ASSERT_TRUE(a.ok());
  std::vector<float> params(kTotal, -1.0f);
  const StatusOr<PsClient::Ticket> pull = a.client().Pull(0, params.data());
  ASSERT_TRUE(pull.ok()) << pull.status().ToString();
  const Status waited = a.client().Wait(*pull);
  ASSERT_TRUE(waited.ok()) << waited.ToString();
  for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(params[i], InitValue(i)) << i;
  EXPECT_EQ(a.aggregator().stats().rejected.Get(RejectReason::kBadSharedMemory), 3u);
  EXPECT_FALSE(a.aggregator().gave_up_on_segment());
}

}  // namespace
}  // namespace psformer::testing
