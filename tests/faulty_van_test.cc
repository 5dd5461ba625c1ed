// FaultyVan over an in-memory Van: zero fractions pass everything through in order, the
// fractions come out about right over many messages, the same seed and stream make the same
// decisions, reordered and delayed messages still arrive exactly once, and bad options are named.
#include "common/transport/faulty_van.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/config_loader.h"

namespace psformer {
namespace {

// A Van that records what it is asked to send; Recv finds nothing (after waiting at most 1 ms,
// so that a FaultyVan waiting for a held message's time loops quickly).
class RecordingVan : public Van {
 public:
  explicit RecordingVan(std::vector<RawMessage>* sent) : sent_(sent) {}
  StatusOr<std::string> Bind(const std::string& endpoint) override { return endpoint; }
  Status Connect(const std::string&, const std::string&) override { return Status::Ok(); }
  Status Send(RawMessage message) override {
    sent_->push_back(std::move(message));
    return Status::Ok();
  }
  StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) override {
    if (timeout_ms != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::optional<RawMessage>();
  }

 private:
  std::vector<RawMessage>* sent_;
};

RawMessage Numbered(int i, const std::string& peer = "p") {
  RawMessage m;
  m.peer = peer;
  m.frames.push_back(Frame::Copy(std::to_string(i)));
  return m;
}

std::vector<int> Numbers(const std::vector<RawMessage>& sent) {
  std::vector<int> out;
  for (const RawMessage& m : sent) out.push_back(std::stoi(std::string(m.frames[0].bytes())));
  return out;
}

FaultyVanOptions Mixed(uint64_t seed, uint64_t stream) {
  FaultyVanOptions o;
  o.drop_fraction = 0.05;
  o.duplicate_fraction = 0.04;
  o.delay_fraction = 0.03;
  o.reorder_fraction = 0.02;
  o.delay_ms = 3600 * 1000;  // held messages leave only by reorder or at the end.
  o.seed = seed;
  o.stream = stream;
  return o;
}

TEST(FaultyVan, ZeroFractionsPassEverythingThroughInOrder) {
  std::vector<RawMessage> sent;
  FaultyVanOptions o;
  EXPECT_FALSE(o.Any());
  FaultyVan van(std::make_unique<RecordingVan>(&sent), o);
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(van.Send(Numbered(i)).ok());
  std::vector<int> expected(500);
  for (int i = 0; i < 500; ++i) expected[i] = i;
  EXPECT_EQ(Numbers(sent), expected);
  EXPECT_EQ(van.stats().delivered, 500u);
  EXPECT_EQ(van.stats().dropped + van.stats().duplicated + van.stats().delayed + van.stats().reordered, 0u);
}

TEST(FaultyVan, FractionsComeOutAboutRight) {
  constexpr int kMessages = 40000;
  std::vector<RawMessage> sent;
  FaultyVanStats stats;
  {
    FaultyVan van(std::make_unique<RecordingVan>(&sent), Mixed(11, 3));
    for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(van.Send(Numbered(i)).ok());
    stats = van.stats();
  }  // the destructor sends what is still held.
  const auto share = [&](uint64_t n) { return static_cast<double>(n) / kMessages; };
  // Binomial standard deviations are below 0.0011 here; 0.006 is more than five of them.
  EXPECT_NEAR(share(stats.dropped), 0.05, 0.006);
  EXPECT_NEAR(share(stats.duplicated), 0.04, 0.006);
  EXPECT_NEAR(share(stats.delayed), 0.03, 0.006);
  EXPECT_NEAR(share(stats.reordered), 0.02, 0.006);
  EXPECT_EQ(stats.messages, static_cast<uint64_t>(kMessages));
  EXPECT_EQ(stats.delivered + stats.dropped + stats.duplicated + stats.delayed + stats.reordered, stats.messages);
  // What arrived: every message not dropped, the duplicated ones twice.
  EXPECT_EQ(sent.size(), kMessages - stats.dropped + stats.duplicated);
  std::vector<int> count(kMessages, 0);
  for (int n : Numbers(sent)) ++count[n];
  for (int i = 0; i < kMessages; ++i) {
    const FaultAction a = DecideFault(Mixed(11, 3), i);
    ASSERT_EQ(count[i], a == FaultAction::kDrop        ? 0
                        : a == FaultAction::kDuplicate ? 2
                                                       : 1)
        << "message " << i << " (" << FaultActionName(a) << ")";
  }
}

TEST(FaultyVan, SameSeedAndStreamMakeTheSameDecisions) {
  std::vector<RawMessage> first, second, other_seed;
  {
    FaultyVan a(std::make_unique<RecordingVan>(&first), Mixed(5, 1));
    FaultyVan b(std::make_unique<RecordingVan>(&second), Mixed(5, 1));
    FaultyVan c(std::make_unique<RecordingVan>(&other_seed), Mixed(6, 1));
    for (int i = 0; i < 3000; ++i) {
      ASSERT_TRUE(a.Send(Numbered(i)).ok());
      ASSERT_TRUE(b.Send(Numbered(i)).ok());
      ASSERT_TRUE(c.Send(Numbered(i)).ok());
    }
  }
  EXPECT_EQ(Numbers(first), Numbers(second));
  EXPECT_NE(Numbers(first), Numbers(other_seed));
  // Streams are independent: another process of the same job decides differently.
  int same = 0;
  for (int i = 0; i < 3000; ++i) same += DecideFault(Mixed(5, 1), i) == DecideFault(Mixed(5, 2), i);
  EXPECT_LT(same, 3000);
  EXPECT_EQ(DecideFault(Mixed(5, 1), 1234), DecideFault(Mixed(5, 1), 1234));
}

TEST(FaultyVan, ReorderedMessageLeavesRightAfterTheNextOneToItsPeer) {
  FaultyVanOptions o;
  o.reorder_fraction = 0.3;
  o.delay_ms = 3600 * 1000;
  o.seed = 21;
  // The first k whose message is reordered and whose successor is delivered.
  int k = 0;
  while (!(DecideFault(o, k) == FaultAction::kReorder && DecideFault(o, k + 1) == FaultAction::kDeliver)) ++k;
  std::vector<RawMessage> sent;
  FaultyVan van(std::make_unique<RecordingVan>(&sent), o);
  for (int i = 0; i <= k + 1; ++i) ASSERT_TRUE(van.Send(Numbered(i)).ok());
  const std::vector<int> order = Numbers(sent);
  ASSERT_EQ(order.size(), static_cast<size_t>(k + 2)) << "nothing still held after its successor went";
  const auto at = [&](int n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  EXPECT_EQ(at(k + 1) + 1, at(k)) << "message " << k << " should follow " << k + 1 << " at once";
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i <= k + 1; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(FaultyVan, ReorderWaitsForTheSamePeer) {
  FaultyVanOptions o;
  o.reorder_fraction = 1.0;
  o.delay_ms = 3600 * 1000;
  std::vector<RawMessage> sent;
  FaultyVan van(std::make_unique<RecordingVan>(&sent), o);
  ASSERT_TRUE(van.Send(Numbered(0, "a")).ok());
  ASSERT_TRUE(van.Send(Numbered(1, "b")).ok());
  EXPECT_TRUE(sent.empty());  // every message is held: none goes out ahead of another.
}

TEST(FaultyVan, DelayedMessageLeavesWhileTheOwnerWaitsInRecv) {
  FaultyVanOptions o;
  o.delay_fraction = 1.0;
  o.delay_ms = 20;
  std::vector<RawMessage> sent;
  FaultyVan van(std::make_unique<RecordingVan>(&sent), o);
  ASSERT_TRUE(van.Send(Numbered(7)).ok());
  EXPECT_TRUE(sent.empty());  // held: it was just sent.
  EXPECT_EQ(van.stats().delayed, 1u);
  // Recv waits until the message is due, sends it, and keeps waiting for its own timeout.
  for (int i = 0; i < 100 && sent.empty(); ++i) ASSERT_TRUE(van.Recv(100).ok());
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(Numbers(sent), std::vector<int>{7});
}

TEST(FaultyVan, RefusesOptionsOutOfRangeNamingTheField) {
  FaultyVanOptions o;
  o.drop_fraction = 1.5;
  Status s = o.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fault.drop_fraction"), std::string::npos) << s.message();
  o.drop_fraction = 0.6;
  o.reorder_fraction = 0.6;
  s = o.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("<= 1"), std::string::npos) << s.message();
  o.reorder_fraction = 0.0;
  o.delay_ms = -1;
  s = o.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fault.delay_ms"), std::string::npos) << s.message();
  o.delay_ms = 0;
  EXPECT_TRUE(o.Validate().ok());
}

TEST(FaultyVan, OptionsComeFromTheFaultSection) {
  proto::FaultConfig fault;
  fault.set_drop_fraction(0.25f);
  fault.set_duplicate_fraction(0.125f);
  fault.set_delay_fraction(0.0625f);
  fault.set_reorder_fraction(0.5f);
  fault.set_delay_ms(9);
  fault.set_seed(77);
  const FaultyVanOptions o = FaultyVanOptions::FromConfig(fault, FaultStream(FaultRole::kServer, 3));
  EXPECT_EQ(o.drop_fraction, 0.25);
  EXPECT_EQ(o.duplicate_fraction, 0.125);
  EXPECT_EQ(o.delay_fraction, 0.0625);
  EXPECT_EQ(o.reorder_fraction, 0.5);
  EXPECT_EQ(o.delay_ms, 9);
  EXPECT_EQ(o.seed, 77u);
  EXPECT_EQ(o.stream, (1ull << 32) | 3);
  EXPECT_NE(FaultStream(FaultRole::kWorker, 3), FaultStream(FaultRole::kServer, 3));
}

TEST(FaultyVan, AConfigWhoseFaultsExceedOneIsRefusedWhenLoaded) {
  const std::string copy = std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt";
  auto config = ResolveConfig(copy, {"fault.drop_fraction=0.6", "fault.reorder_fraction=0.5"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("must be <= 1"), std::string::npos) << config.status().message();
  config = ResolveConfig(copy, {"fault.delay_ms=-1"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("fault.delay_ms"), std::string::npos) << config.status().message();
  config = ResolveConfig(copy, {"fault.drop_fraction=0.5", "fault.reorder_fraction=0.5"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(FaultyVanOptions::FromConfig(config->fault(), 0).Validate().ok());
}

}  // namespace
}  // namespace psformer
