// A host aggregator checks its workers' shares' CRC-32C in the pass that sums them, not in a pass
// of its own when they arrive: a damaged share is still refused with kBadChecksum (later: when
// the group's last share is in), the sum it would have spoiled is never sent, the other workers'
// shares stay held, and the damaged share sent again intact completes the sum, which the server
// then acknowledges to every worker of the group.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "pserver/aggregator/host_aggregator.h"
#include "pserver/wire/piece_table.h"
#include "pserver/wire/wire_message.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kTotal = 20011;  // three summing blocks: two threads' parts to combine

// Host groups of workers 0..1 and worker 2, one server; group 0's aggregator is the one here.
proto::JobConfig TwoGroupConfig() {
  proto::JobConfig config = PsConfig(3, 1, proto::ClusterConfig::BSP);
  config.mutable_cluster()->add_host_groups(2);
  config.mutable_cluster()->add_host_groups(1);
  return config;
}

class AggregatorShares : public ::testing::Test {
 protected:
  AggregatorShares() : servers_(TwoGroupConfig(), kTotal) {
    HostAggregatorOptions o;
    o.config = TwoGroupConfig();
    o.parameter_count = kTotal;
    o.job_id = kJobId;
    o.servers = servers_.endpoints();
    o.endpoint = "ipc://" + dir_.File("aggregator-0.sock");
    o.threads = 2;  // the summing pass's CRCs are made per thread's part, then combined
    auto made = HostAggregator::Create(std::move(o), std::make_unique<ZmqVan>());
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (!made.ok()) return;
    aggregator_ = std::move(made).value();
    run_ = std::async(std::launch::async, [a = aggregator_.get()] { return a->Run(); });
    EXPECT_TRUE(worker_.Connect("aggregator", aggregator_->endpoint()).ok());
  }
  ~AggregatorShares() override {
    if (!aggregator_) return;
    aggregator_->Stop();
    run_.wait();
  }

  // Worker w's share of step 1 (the whole model: one piece), request `sequence`; with
  // `flip_at` >= 0 one bit of that payload byte flipped after its CRC was made.
  void SendShare(int w, uint64_t sequence, int flip_at = -1) {
    proto::Header h = MessageHeader(proto::PUSH, kJobId, proto::WORKER, static_cast<uint32_t>(w), 0);
    h.set_step(1);
    h.set_dtype(proto::FLOAT32);
    h.set_begin(0);
    h.set_end(kTotal);
    h.set_target_tokens(Tokens(w, 1));
    h.set_sequence(sequence);
    const std::vector<float> grad = Gradient(w, 1, kTotal);
    std::vector<Frame> payload;
    AppendViewFrames(grad.data(), grad.size() * 4, 4096, 4, nullptr, &payload);  // several frames
    for (Frame& f : payload) f = Frame::Copy(f.data(), f.size());                // owned: `grad` goes out of scope
    RawMessage raw = EncodeMessage("aggregator", h, std::move(payload));
    if (flip_at >= 0) {
      size_t at = static_cast<size_t>(flip_at);
      for (size_t i = 1; i < raw.frames.size(); ++i) {
        if (at < raw.frames[i].size()) {
          std::string bytes(raw.frames[i].bytes());
          bytes[at] ^= 0x10;
          raw.frames[i] = Frame::Own(std::move(bytes));
          break;
        }
        at -= raw.frames[i].size();
      }
    }
    ASSERT_TRUE(worker_.Send(std::move(raw)).ok());
  }

  TempDir dir_;
  ServerGroup servers_;
  std::unique_ptr<HostAggregator> aggregator_;
  std::future<Status> run_;
  ZmqVan worker_;  // speaks for both workers of group 0
};

TEST_F(AggregatorShares, ADamagedShareIsRefusedInTheSummingPassAndItsResendCompletesTheSum) {
  ASSERT_TRUE(aggregator_);
  SendShare(1, /*sequence=*/11);
  SendShare(0, /*sequence=*/10, /*flip_at=*/5000);  // in the second frame
  const WireMessage refused = NextReply(worker_);
  EXPECT_EQ(refused.header.type(), proto::ERROR);
  EXPECT_EQ(refused.header.sequence(), 10u);
  EXPECT_EQ(refused.header.reject_reason(), static_cast<uint32_t>(RejectReason::kBadChecksum));
  EXPECT_NE(refused.header.error().find("found in the summing pass"), std::string::npos) << refused.header.error();
  EXPECT_EQ(aggregator_->stats().sums_sent.load(), 0u);  // the spoiled sum never left
  EXPECT_EQ(aggregator_->stats().rejected.Get(RejectReason::kBadChecksum), 1u);

  SendShare(0, /*sequence=*/12);  // intact: worker 1's share, still held, completes the sum with it
  std::vector<uint64_t> acked;
  for (int i = 0; i < 2; ++i) {
    const WireMessage ack = NextReply(worker_);
    EXPECT_EQ(ack.header.type(), proto::ACK) << ack.header.error();
    acked.push_back(ack.header.sequence());
  }
  std::sort(acked.begin(), acked.end());
  EXPECT_EQ(acked, (std::vector<uint64_t>{11, 12}));
  EXPECT_EQ(aggregator_->stats().sums_sent.load(), 1u);
  EXPECT_EQ(servers_.server(0).stats().pushes_accepted.load(), 1u);
}

// Every share intact: no refusal, one sum, both workers acknowledged (the CRCs made in the pass
// match what the workers' clients made).
TEST_F(AggregatorShares, IntactSharesAreSummedWithoutRefusal) {
  ASSERT_TRUE(aggregator_);
  SendShare(0, 20);
  SendShare(1, 21);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(NextReply(worker_).header.type(), proto::ACK);
  EXPECT_EQ(aggregator_->stats().sums_sent.load(), 1u);
  EXPECT_EQ(aggregator_->stats().rejected.Get(RejectReason::kBadChecksum), 0u);
}

}  // namespace
}  // namespace psformer::testing
