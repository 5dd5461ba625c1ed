// When the client sends a request again (Resender, pserver/client/resender.h): only what is lost,
// never what is still on its way. The policy alone, on a clock the test sets; then a push and a
// pull through a slow link (a relay at 24 MB/s on loopback) that take longer than retry_ms
// several times over and still cross it once; and a lost message, which is still resent.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/transport/forwarding_van.h"
#include "common/transport/frame.h"
#include "pserver/client/resender.h"
#include "pserver/client/segment_refusals.h"
#include "pserver/timing.h"
#include "pserver/wire/wire_message.h"
#include "tests/pserver_test_util.h"
#include "tests/slow_link.h"

namespace psformer::testing {
namespace {

using Clock = Resender::Clock;
using std::chrono::milliseconds;

TEST(ResenderPolicy, APartWithoutPayloadIsDueAfterRetryMsThenBacksOff) {
  Resender resender(/*retry_ms=*/100, /*peers=*/1);
  const Clock::time_point t0 = Clock::now();
  Resender::Send send;
  EXPECT_FALSE(resender.Due(send, 0, 0, t0 + milliseconds(1000))) << "never sent: nothing to resend";
  EXPECT_EQ(resender.Sent(&send, t0, nullptr), nullptr);
  EXPECT_FALSE(resender.Due(send, 0, 0, t0 + milliseconds(99)));
  EXPECT_TRUE(resender.Due(send, 0, 0, t0 + milliseconds(100)));
  resender.Sent(&send, t0 + milliseconds(100), nullptr);
  EXPECT_FALSE(resender.Due(send, 0, 0, t0 + milliseconds(299)));
  EXPECT_TRUE(resender.Due(send, 0, 0, t0 + milliseconds(300))) << "2x retry_ms after the second send";
}

TEST(ResenderPolicy, APayloadIsNeverDueWhileTheTransportHoldsIt) {
  Resender resender(100, 1);
  const Clock::time_point t0 = Clock::now();
  Resender::Send send;
  auto payload = std::make_shared<std::vector<float>>(16);
  std::shared_ptr<const void> frames_owner = resender.Sent(&send, t0, payload);
  ASSERT_NE(frames_owner, nullptr);
  EXPECT_EQ(frames_owner.get(), payload.get()) << "the frames still point at the payload";
  EXPECT_TRUE(send.in_transport());
  EXPECT_FALSE(resender.Due(send, 0, 0, t0 + milliseconds(100000))) << "still queued: not lost";
  std::weak_ptr<std::vector<float>> watch = payload;
  payload.reset();
  EXPECT_FALSE(watch.expired()) << "the frames keep the payload alive";
  const Clock::time_point released = Clock::now();
  frames_owner.reset();  // the transport let go of the last frame
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(send.in_transport());
  EXPECT_TRUE(resender.Due(send, 0, 0, released + milliseconds(1000)));
  EXPECT_FALSE(resender.Due(send, 0, 0, released - milliseconds(1))) << "the wait counts from when it left";
}

TEST(ResenderPolicy, RepliesFromThePeerAndAwaitedBytesPostponeTheResend) {
  Resender resender(100, 2);
  const Clock::time_point t0 = Clock::now();
  Resender::Send send;
  resender.Sent(&send, t0, nullptr);
  resender.Heard(1, t0 + milliseconds(500));  // another server: changes nothing for peer 0
  EXPECT_TRUE(resender.Due(send, 0, 0, t0 + milliseconds(100)));
  resender.Heard(0, t0 + milliseconds(80));
  EXPECT_FALSE(resender.Due(send, 0, 0, t0 + milliseconds(179))) << "peer 0's link is moving";
  EXPECT_TRUE(resender.Due(send, 0, 0, t0 + milliseconds(180)));
  // 125 MB still to come at the slowest link allowed for (1 Gbit/s): one second more.
  const uint64_t awaited = kSlowestLinkBytesPerSecond;
  EXPECT_EQ(resender.Wait(1, awaited), milliseconds(1100));
  EXPECT_FALSE(resender.Due(send, 0, awaited, t0 + milliseconds(1179)));
  EXPECT_TRUE(resender.Due(send, 0, awaited, t0 + milliseconds(1180)));
}

TEST(ResenderPolicy, RetryMsZeroNeverResends) {
  Resender resender(0, 1);
  Resender::Send send;
  const Clock::time_point t0 = Clock::now();
  resender.Sent(&send, t0, nullptr);
  EXPECT_FALSE(resender.Due(send, 0, 0, t0 + std::chrono::hours(1)));
}

// 48 MB each way through a link of 24 MB/s: two seconds, almost 7 times retry_ms. Before the
// Resender, the push was sent again after 300 and 900 ms, each copy queued behind the first.
constexpr uint64_t kLinkElements = 12u << 20;  // 48 MB of fp32
constexpr double kLinkBytesPerSecond = 24e6;

proto::JobConfig SlowLinkConfig() {
  proto::JobConfig config = PsConfig(1, 1, proto::ClusterConfig::BSP);
  config.mutable_cluster()->set_piece_elements(1u << 20);  // 4 MB pieces: 12 of them
  config.mutable_cluster()->set_frame_bytes(1 << 20);
  return config;
}

// When the client stops resending to a server whose shared-memory segment it keeps refusing
// (SegmentRefusals): a burst of refusals (every part in flight refused at once, as when the sender
// died) never; refusals of one segment going on past the patience, yes, naming it; rare refusals
// far apart never add up; patience 0 never gives up.
TEST(SegmentRefusalPolicy, OnlyRefusalsOfOneSegmentThatGoOnPastThePatienceStopTheWait) {
  const Clock::time_point t0{};
  const std::string seg = "/psformer-5eed-42-abc-0";
  SegmentRefusals burst(/*patience_ms=*/1000, /*forget_after_ms=*/5000);
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(burst.Refused(seg, "slot 3 is stale", t0 + milliseconds(i)));

  SegmentRefusals going_on(1000, 5000);
  EXPECT_FALSE(going_on.Refused(seg, "slot 5 holds no payload", t0));
  EXPECT_FALSE(going_on.Refused(seg, "slot 5 holds no payload", t0 + milliseconds(400)));
  EXPECT_FALSE(going_on.Refused("/psformer-other", "x", t0 + milliseconds(1200)));  // another segment: its own count
  const std::optional<std::string> stop = going_on.Refused(seg, "slot 5 holds no payload", t0 + milliseconds(1200));
  ASSERT_TRUE(stop.has_value());
  EXPECT_NE(stop->find(seg), std::string::npos) << *stop;
  EXPECT_NE(stop->find("3 times over 1.2 s"), std::string::npos) << *stop;
  EXPECT_NE(stop->find("heartbeat timeout (1000 ms)"), std::string::npos) << *stop;
  EXPECT_NE(stop->find("slot 5 holds no payload"), std::string::npos) << *stop;

  SegmentRefusals far_apart(1000, 5000);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(far_apart.Refused(seg, "stale", t0 + milliseconds(6000 * i)));

  SegmentRefusals never(0, 5000);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(never.Refused(seg, "stale", t0 + milliseconds(1000 * i)));
}

TEST(ResendOnSlowLink, APushAndAPullThatOutlastRetryMsCrossTheLinkOnce) {
  const proto::JobConfig config = SlowLinkConfig();
  ServerGroup group(config, kLinkElements);
  SlowLink link(group.endpoints()[0], kLinkBytesPerSecond);
  PsClientOptions o;
  o.job_id = kJobId;
  o.servers = {link.endpoint()};
  o.parameter_count = kLinkElements;
  o.frame_bytes = 1 << 20;
  o.timeout_ms = 60000;
  o.retry_ms = 300;
  o.pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kLinkElements, {}));
  ASSERT_EQ(o.pieces->pieces().size(), 12u);
  auto client = PsClient::Create(std::move(o));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  PsClient& c = **client;
  ASSERT_TRUE(c.Hello().ok());

  std::vector<float> grad(kLinkElements, 0.5f), params(kLinkElements, 0.0f);
  const auto push = c.Push(1, grad.data(), 100, 1.0);
  ASSERT_TRUE(push.ok()) << push.status().ToString();
  ASSERT_TRUE(c.Wait(*push).ok());
  EXPECT_GT(c.last_wait_s(), 0.5) << "the link was not slow: the test shows nothing";
  const auto pull = c.Pull(1, params.data());
  ASSERT_TRUE(pull.ok()) << pull.status().ToString();
  ASSERT_TRUE(c.Wait(*pull).ok());
  EXPECT_GT(c.last_wait_s(), 0.5) << "the link was not slow: the test shows nothing";

  const ParameterServerStats& stats = group.server(0).stats();
  EXPECT_EQ(stats.duplicates.load(), 0u) << "a push piece crossed the link twice";
  EXPECT_EQ(c.duplicate_acks(), 0u);
  EXPECT_EQ(stats.pulls_answered.load(), 12u) << "a pull's piece was answered more than once";
  EXPECT_EQ(stats.updates.load(), 1u);
  for (uint64_t i = 0; i < kLinkElements; i += 4099) ASSERT_NE(params[i], InitValue(i)) << "not updated at " << i;
}

// Drops the first PUSH message it is asked to send (its frames are released at once, unsent).
class DropFirstPushVan : public ForwardingVan {
 public:
  using ForwardingVan::ForwardingVan;
  Status Send(RawMessage message) override {
    WireMessage msg;
    RawMessage copy = message;
    if (!dropped_ && !ParseMessage(std::move(copy), &msg) && msg.header.type() == proto::PUSH) {
      dropped_ = true;
      return Status::Ok();
    }
    return inner_->Send(std::move(message));
  }
  bool dropped() const { return dropped_; }

 private:
  bool dropped_ = false;
};

// A push the transport lost is let go of at once, so it is sent again after retry_ms, as before.
TEST(ResendOnSlowLink, ALostPushIsStillSentAgain) {
  const proto::JobConfig config = PsConfig(1, 1, proto::ClusterConfig::BSP);
  ServerGroup group(config, 600);
  PsClientOptions o;
  o.job_id = kJobId;
  o.servers = group.endpoints();
  o.parameter_count = 600;
  o.timeout_ms = 20000;
  o.retry_ms = 50;
  auto van = std::make_unique<DropFirstPushVan>(std::make_unique<ZmqVan>());
  const DropFirstPushVan* dropper = van.get();
  auto client = PsClient::Create(std::move(o), std::move(van));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->Hello().ok());
  std::vector<float> grad(600, 0.25f);
  const auto push = (*client)->Push(1, grad.data(), 5, 1.0);
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE((*client)->Wait(*push).ok());
  EXPECT_TRUE(dropper->dropped());
  std::vector<float> params(600, 0.0f);
  const auto pull = (*client)->Pull(1, params.data());  // answered once the step is applied
  ASSERT_TRUE(pull.ok());
  ASSERT_TRUE((*client)->Wait(*pull).ok());
  EXPECT_EQ(group.server(0).stats().updates.load(), 1u);
  EXPECT_EQ(group.server(0).stats().duplicates.load(), 0u);
}

}  // namespace
}  // namespace psformer::testing
