// Slices (common/transport/zmq_slices.h, ZmqVanOptions::slice_bytes): a message cut into slices
// and rejoined is the message sent, frame for frame and byte for byte, also when slices of other
// messages come between; a slice that does not fit (out of order, malformed, a frame over the
// limit) is refused and its message dropped; a message begun again starts over. Through ZmqVans:
// big held messages cross whole both ways (a DEALER's, and a server's answers on its held
// ROUTER), and through a slow link a message ranked first overtakes one whose slices are leaving,
// which without slices it cannot.
#include "common/transport/zmq_slices.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/curve_keys.h"
#include "common/transport/payload_sealer.h"
#include "common/transport/zmq_van.h"
#include "tests/slow_link.h"
#include "tests/van_test_util.h"

namespace psformer::testing {
namespace {

// Bytes that differ from frame to frame and from place to place.
std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + static_cast<size_t>(seed) * 17) % 251);
  return s;
}

std::vector<Frame> Frames(const std::vector<size_t>& sizes, int seed) {
  std::vector<Frame> frames;
  for (size_t i = 0; i < sizes.size(); ++i)
    frames.push_back(Frame::Copy(Pattern(sizes[i], seed + static_cast<int>(i))));
  return frames;
}

void ExpectSameFrames(const std::vector<Frame>& got, const std::vector<Frame>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].bytes(), want[i].bytes()) << "frame " << i;
}

// A slice as the format in zmq_slices.h spells it, written here by hand.
std::vector<Frame> HandSlice(uint64_t id, uint32_t index, bool last, const std::vector<std::string>& pieces,
                             const std::vector<uint8_t>& ends) {
  std::string control = "PSSL";
  for (int i = 0; i < 8; ++i) control.push_back(static_cast<char>((id >> (8 * i)) & 0xff));
  for (int i = 0; i < 4; ++i) control.push_back(static_cast<char>((index >> (8 * i)) & 0xff));
  control.push_back(last ? 1 : 0);
  for (uint8_t e : ends) control.push_back(static_cast<char>(e));
  std::vector<Frame> frames{Frame(), Frame::Own(control)};
  for (const std::string& p : pieces) frames.push_back(Frame::Copy(p));
  return frames;
}

TEST(ZmqSlices, ACutMessageRejoinsFrameForFrame) {
  // A header, an empty frame, frames smaller than, equal to and several times a slice.
  const std::vector<Frame> sent = Frames({7, 0, 1024, 3000, 10, 1, 2049}, 1);
  SlicePlan plan(sent, 1024, 42);
  ASSERT_EQ(plan.size(), 6u);  // 6,091 bytes, packed into slices of 1,024
  SliceAssembler assembler;
  std::optional<std::vector<Frame>> whole;
  for (size_t k = 0; k < plan.size(); ++k) {
    std::vector<Frame> slice = plan.Slice(k);
    ASSERT_TRUE(IsSlice(slice));
    size_t bytes = 0;
    for (size_t i = 2; i < slice.size(); ++i) bytes += slice[i].size();
    EXPECT_LE(bytes, 1024u) << "slice " << k;
    ASSERT_FALSE(whole.has_value()) << "whole before its last slice";
    auto taken = assembler.Take("p", std::move(slice));
    ASSERT_TRUE(taken.ok()) << taken.status().ToString();
    whole = std::move(*taken);
  }
  ASSERT_TRUE(whole.has_value());
  ExpectSameFrames(*whole, sent);
  EXPECT_EQ(assembler.partial(), 0u);
  EXPECT_FALSE(IsSlice(sent)) << "a whole message must not read as a slice";
}

TEST(ZmqSlices, InterleavedMessagesOfOnePeerAndOfTwoRejoin) {
  const std::vector<Frame> a = Frames({5, 5000}, 2), b = Frames({9, 700, 2500}, 3);
  SlicePlan pa(a, 1000, 1), pb(b, 1000, 2), pc(a, 1000, 1);  // pc: same id as pa, another peer
  SliceAssembler assembler;
  std::map<std::string, std::vector<Frame>> done;
  const size_t most = std::max(pa.size(), pb.size());
  for (size_t k = 0; k < most; ++k) {
    for (auto [peer, plan] : {std::pair{"x", &pa}, std::pair{"x", &pb}, std::pair{"y", &pc}}) {
      if (k >= plan->size()) continue;
      auto taken = assembler.Take(peer, plan->Slice(k));
      ASSERT_TRUE(taken.ok()) << taken.status().ToString();
      if (*taken) done[std::string(peer) + std::to_string(plan == &pb)] = std::move(**taken);
    }
  }
  ASSERT_EQ(done.size(), 3u);
  ExpectSameFrames(done["x0"], a);
  ExpectSameFrames(done["x1"], b);
  ExpectSameFrames(done["y0"], a);
}

TEST(ZmqSlices, HandWrittenSlicesRejoin) {
  SliceAssembler assembler;
  ASSERT_TRUE(assembler.Take("p", HandSlice(7, 0, false, {"head", "ab"}, {1, 0})).ok());
  auto taken = assembler.Take("p", HandSlice(7, 1, true, {"cd", ""}, {1, 1}));
  ASSERT_TRUE(taken.ok() && taken->has_value()) << taken.status().ToString();
  ASSERT_EQ((*taken)->size(), 3u);
  EXPECT_EQ((**taken)[0].bytes(), "head");
  EXPECT_EQ((**taken)[1].bytes(), "abcd");
  EXPECT_EQ((**taken)[2].bytes(), "");
}

// A sender that restarts counts its messages from 0 again: a first slice of a message begun
// starts it over, and the message rejoined is the new one.
TEST(ZmqSlices, AMessageBegunAgainStartsOver) {
  SliceAssembler assembler;
  ASSERT_TRUE(assembler.Take("p", HandSlice(3, 0, false, {"old"}, {0})).ok());
  ASSERT_TRUE(assembler.Take("p", HandSlice(3, 0, false, {"new"}, {1})).ok());
  EXPECT_EQ(assembler.partial(), 1u);
  auto taken = assembler.Take("p", HandSlice(3, 1, true, {"tail"}, {1}));
  ASSERT_TRUE(taken.ok() && taken->has_value()) << taken.status().ToString();
  ASSERT_EQ((*taken)->size(), 2u);
  EXPECT_EQ((**taken)[0].bytes(), "new");
  EXPECT_EQ((**taken)[1].bytes(), "tail");
  EXPECT_EQ(assembler.partial(), 0u);
}

// Each refusal names what is wrong and leaves nothing of the message behind.
void ExpectRefused(SliceAssembler& assembler, std::vector<Frame> slice, const std::string& why) {
  auto taken = assembler.Take("p", std::move(slice));
  ASSERT_FALSE(taken.ok()) << "expected a refusal: " << why;
  EXPECT_NE(taken.status().message().find(why), std::string::npos) << taken.status().ToString();
  EXPECT_EQ(assembler.partial(), 0u);
}

TEST(ZmqSlices, SlicesThatDoNotFitAreRefused) {
  SliceAssembler assembler(/*max_frame_bytes=*/8);
  ExpectRefused(assembler, HandSlice(1, 1, true, {"x"}, {1}), "out of order (expected none)");
  ASSERT_TRUE(assembler.Take("p", HandSlice(2, 0, false, {"x"}, {0})).ok());
  ExpectRefused(assembler, HandSlice(2, 2, true, {"x"}, {1}), "out of order (expected 1)");
  ExpectRefused(assembler, HandSlice(4, 0, true, {"x"}, {0}), "ended inside a frame");
  ExpectRefused(assembler, HandSlice(5, 0, true, {"x"}, {2}), "marked 2");
  ExpectRefused(assembler, HandSlice(6, 0, true, {"123456789"}, {1}), "over the limit of 8");
  std::vector<Frame> bad = HandSlice(7, 0, true, {"x"}, {1});
  bad[1] = Frame::Copy(std::string("PSSL"));
  ExpectRefused(assembler, bad, "malformed control frame");
  bad = HandSlice(8, 0, true, {"x"}, {1});
  bad[1] = Frame::Copy("XXXX" + std::string(bad[1].bytes().substr(4)));
  ExpectRefused(assembler, bad, "malformed control frame");
}

constexpr double kLinkRate = 32e6;  // bytes a second

ZmqVanOptions Sliced(size_t slice_bytes) {
  ZmqVanOptions o;
  o.send_window = 1;
  o.slice_bytes = static_cast<int>(slice_bytes);
  o.send_buffer_bytes = 64 * 1024;
  return o;
}

RawMessage Message(const std::string& peer, const std::vector<Frame>& frames, uint64_t rank) {
  RawMessage m;
  m.peer = peer;
  m.frames = frames;
  m.rank = SendRank{1, rank};
  return m;
}

// The name `server` knows `client` by (its connection `name`), from a message the client sends.
std::string PeerOf(ZmqVan& client, const std::string& name, ZmqVan& server) {
  RawMessage hello;
  hello.peer = name;
  hello.frames.push_back(Frame::Copy(std::string("hello")));
  EXPECT_TRUE(client.Send(std::move(hello)).ok());
  return RecvOne(server).peer;
}

enum class Security { kNone, kCurve, kSealed };

// Big held messages both ways between a client and a server whose answers are held, with CURVE,
// with every frame sealed (AES-256-GCM: slices cut sealed frames, rejoined before they open), or
// with neither.
void ExpectHeldMessagesCrossWhole(Security security) {
  ZmqVanOptions o = Sliced(64 * 1024);
  o.hold_answers = true;
  ZmqVanOptions c = Sliced(64 * 1024);
  if (security == Security::kCurve) {
    auto keys = GenerateCurveKeys();
    ASSERT_TRUE(keys.ok()) << keys.status().ToString();
    o.curve = keys->ForServer();
    c.curve = keys->ForClient();
  } else if (security == Security::kSealed) {
    auto sealer = PayloadSealer::Create(std::string(32, 'k'));
    ASSERT_TRUE(sealer.ok()) << sealer.status().ToString();
    o.sealer = c.sealer = *sealer;
  }
  ZmqVan server(o);
  auto bound = server.Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  ZmqVan client(c);
  ASSERT_TRUE(client.Connect("srv", *bound).ok());
  std::vector<std::vector<Frame>> sent;
  for (int i = 0; i < 6; ++i) sent.push_back(Frames({16, 300000 + 4096 * static_cast<size_t>(i), 70000, 3}, 10 * i));
  // A DEALER's, in the order sent (equal ranks); then the server's answers on its held ROUTER.
  // (A Van is one thread's: each sends before a pump polls it.)
  std::string peer;
  for (const auto& frames : sent) ASSERT_TRUE(client.Send(Message("srv", frames, 1)).ok());
  {
    Pump pump(client);
    for (const auto& frames : sent) {
      RawMessage in = RecvOne(server);
      ExpectSameFrames(in.frames, frames);
      peer = in.peer;
    }
  }
  EXPECT_EQ(client.held(), 0u);
  for (const auto& frames : sent) ASSERT_TRUE(server.Send(Message(peer, frames, 1)).ok());
  {
    Pump pump(server);
    for (const auto& frames : sent) ExpectSameFrames(RecvOne(client).frames, frames);
  }
  EXPECT_EQ(server.held(), 0u);
}

TEST(ZmqSlices, HeldMessagesCrossWholeBothWays) { ExpectHeldMessagesCrossWhole(Security::kNone); }
TEST(ZmqSlices, HeldMessagesCrossWholeBothWaysUnderCurve) { ExpectHeldMessagesCrossWhole(Security::kCurve); }
TEST(ZmqSlices, HeldMessagesCrossWholeBothWaysSealed) { ExpectHeldMessagesCrossWhole(Security::kSealed); }

// A Van that receives slices from two peers at once gets every message whole (one Recv reads
// on from a slice to the other connections, each once).
TEST(ZmqSlices, SlicesFromTwoPeersAtOnceRejoin) {
  ZmqVanOptions o = Sliced(16 * 1024);
  o.hold_answers = true;
  ZmqVan a(o), b(o);
  auto at_a = a.Bind("tcp://127.0.0.1:0");
  auto at_b = b.Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(at_a.ok() && at_b.ok());
  ZmqVan client;
  ASSERT_TRUE(client.Connect("a", *at_a).ok());
  ASSERT_TRUE(client.Connect("b", *at_b).ok());
  const std::string peer_a = PeerOf(client, "a", a), peer_b = PeerOf(client, "b", b);
  std::vector<std::vector<Frame>> sent;
  for (int i = 0; i < 8; ++i) sent.push_back(Frames({4, 100000 + 1000 * static_cast<size_t>(i)}, i));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE((i % 2 ? b : a).Send(Message(i % 2 ? peer_b : peer_a, sent[i], 1)).ok());
  std::map<std::string, int> got;
  {
    Pump pa(a), pb(b);
    for (int i = 0; i < 8; ++i) {
      RawMessage in = RecvOne(client);
      bool known = false;
      for (int j = 0; j < 8; ++j) {
        if (in.frames.size() == 2 && in.frames[1].bytes() == sent[j][1].bytes()) known = true;
      }
      EXPECT_TRUE(known) << "message " << i << " is none of those sent";
      ++got[in.peer];
    }
  }
  EXPECT_EQ(got["a"], 4);
  EXPECT_EQ(got["b"], 4);
}

// Sends one big message through a slow link, then, once it is leaving, a small one ranked before
// it; returns the names in the order they arrived.
std::vector<std::string> ArrivalOrder(size_t slice_bytes) {
  ZmqVan server;
  auto bound = server.Bind("tcp://127.0.0.1:0");
  EXPECT_TRUE(bound.ok()) << bound.status().ToString();
  if (!bound.ok()) return {};
  SlowLink link(*bound, kLinkRate);
  ZmqVan client(Sliced(slice_bytes));
  EXPECT_TRUE(client.Connect("srv", link.endpoint()).ok());
  // 16 MiB: half a second on the link, more than loopback's and the relay's buffers hold.
  const std::vector<Frame> big = Frames({3, 16u << 20}, 1);
  std::vector<Frame> big_named = big;
  big_named[0] = Frame::Copy(std::string("big"));
  std::vector<Frame> urgent = Frames({6, 4096}, 2);
  urgent[0] = Frame::Copy(std::string("urgent"));
  std::vector<std::string> order;
  EXPECT_TRUE(client.Send(Message("srv", big_named, 5)).ok());
  {
    Pump pump(client);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the big one is on its way
    // (Send from this thread while the pump polls would share the Van: hand the urgent one over
    // after the pump stops instead.)
  }
  EXPECT_TRUE(client.Send(Message("srv", urgent, 0)).ok());
  Pump pump(client);
  for (int i = 0; i < 2; ++i) order.emplace_back(RecvOne(server).frames.at(0).bytes());
  return order;
}

TEST(ZmqSlices, AMessageRankedFirstOvertakesOneLeavingInSlices) {
  EXPECT_EQ(ArrivalOrder(64 * 1024), (std::vector<std::string>{"urgent", "big"}));
  // The control: whole, the big one was in ZeroMQ's hands before the urgent one came.
  EXPECT_EQ(ArrivalOrder(0), (std::vector<std::string>{"big", "urgent"}));
}

}  // namespace
}  // namespace psformer::testing
