// Holding back by rank (ZmqVanOptions::send_window, cluster.send_window): through a slow link on
// loopback (tests/slow_link.h), what a DEALER's connection held leaves lowest rank first, and a
// message ranked ahead of them overtakes every one it held; so do a ROUTER's answers to a tcp://
// peer where answers are held (a server's), but never those on ipc://; closing the Van still
// hands over everything it held. Without a window, the order sent.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/zmq_van.h"
#include "tests/slow_link.h"
#include "tests/test_util.h"
#include "tests/van_test_util.h"

namespace psformer::testing {
namespace {

// The i-th test message's text, "m<i>" (appended, not `"m" + std::to_string(i)`: GCC 12 reports
// a false -Wrestrict overlap for that form).
std::string Nth(int i) {
  std::string text = "m";
  text += std::to_string(i);
  return text;
}

constexpr int kMessages = 48;
constexpr size_t kPayload = 512 * 1024;  // 24 MiB in all: more than loopback's buffers hold
constexpr double kLinkRate = 32e6;       // bytes a second: ~0.8 s to carry it all

// A message named `name` with a payload, ranked `rank` (its `begin`, in step 1).
RawMessage Ranked(const std::string& peer, const std::string& name, uint64_t rank) {
  RawMessage m;
  m.peer = peer;
  m.frames.push_back(Frame::Copy(name));
  m.frames.push_back(Frame::Copy(std::string(kPayload, 'x')));
  m.rank = SendRank{1, rank};
  return m;
}

ZmqVanOptions Windowed() {
  ZmqVanOptions o;
  o.send_window = 1;
  return o;
}

// Receives kMessages at `receiver`: m0, m1, ... in the order they were sent.
void ExpectInTheOrderSent(Van& receiver) {
  for (int i = 0; i < kMessages; ++i) {
    RawMessage in = RecvOne(receiver);
    ASSERT_EQ(in.frames.size(), 2u);
    EXPECT_EQ(in.frames[0].bytes(), Nth(i));
  }
}

// A server van bound on loopback and a slow link in front of it, for a client to connect to
// (no link if the van could not bind).
struct SlowServer {
  explicit SlowServer(const ZmqVanOptions& options = {}) : van(options) {
    auto bound = van.Bind("tcp://127.0.0.1:0");
    EXPECT_TRUE(bound.ok()) << bound.status().ToString();
    if (bound.ok()) link = std::make_unique<SlowLink>(*bound, kLinkRate);
  }
  ZmqVan van;
  std::unique_ptr<SlowLink> link;
};

// The name `server` knows `client` by (its connection "srv"), from a message the client sends.
std::string PeerOfHello(ZmqVan& client, ZmqVan& server) {
  RawMessage hello;
  hello.peer = "srv";
  hello.frames.push_back(Frame::Copy(std::string("hello")));
  EXPECT_TRUE(client.Send(std::move(hello)).ok());
  return RecvOne(server).peer;
}

// Sends kMessages ranked kMessages..1 (the first made last in rank) and then one ranked 0 through
// `sender` to `peer`, faster than the link takes them; then receives them all at `receiver` while
// `sender` is pumped. Checks that some were held, that the urgent one overtook every held one,
// and that the held ones came lowest rank first.
void ExpectHeldLeaveByRank(ZmqVan& sender, const std::string& peer, Van& receiver) {
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(sender.Send(Ranked(peer, Nth(i), kMessages - i)).ok());
  }
  const size_t held = sender.held();
  ASSERT_GT(held, 1u) << "the link should be full: too little was held back to test an order";
  ASSERT_TRUE(sender.Send(Ranked(peer, "urgent", 0)).ok());
  // Held with it (the Send may have handed over some that found room first).
  const size_t behind_urgent = sender.held() - 1;
  ASSERT_GT(behind_urgent, 0u) << "the urgent message should have been held with others";
  std::vector<std::string> order;
  {
    Pump pump(sender);
    for (int i = 0; i <= kMessages; ++i) {
      RawMessage in = RecvOne(receiver);
      ASSERT_EQ(in.frames.size(), 2u);
      order.emplace_back(in.frames[0].bytes());
    }
  }
  // What was handed to ZeroMQ before crosses first, in the order handed; then what was held,
  // which the urgent one leads, lowest rank first.
  size_t urgent = 0;
  while (urgent < order.size() && order[urgent] != "urgent") ++urgent;
  EXPECT_LE(urgent, kMessages - behind_urgent) << "the message ranked first should overtake every held one";
  std::vector<int> tail;  // the indices of the last `held` to arrive, urgent aside
  for (size_t k = order.size(); k-- > 0 && tail.size() < held;) {
    if (order[k] != "urgent") tail.insert(tail.begin(), std::stoi(order[k].substr(1)));
  }
  for (size_t k = 1; k < tail.size(); ++k) {
    EXPECT_GT(tail[k - 1], tail[k]) << "held messages should leave lowest rank (latest sent) first; " << held
                                    << " were held";
  }
  EXPECT_EQ(sender.held(), 0u);
}

TEST(SendWindow, HeldMessagesToAServerLeaveByRank) {
  SlowServer server;
  ASSERT_NE(server.link, nullptr);
  ZmqVan client(Windowed());
  ASSERT_TRUE(client.Connect("srv", server.link->endpoint()).ok());
  ExpectHeldLeaveByRank(client, "srv", server.van);
}

// Where answers are held (a server's Van), those to a peer that came over tcp:// leave by rank
// like a DEALER's.
TEST(SendWindow, HeldAnswersToATcpPeerLeaveByRank) {
  ZmqVanOptions o = Windowed();
  o.hold_answers = true;
  o.send_buffer_bytes = 64 * 1024;
  SlowServer server(o);
  ASSERT_NE(server.link, nullptr);
  ZmqVan client;
  ASSERT_TRUE(client.Connect("srv", server.link->endpoint()).ok());
  const std::string peer = PeerOfHello(client, server.van);
  ExpectHeldLeaveByRank(server.van, peer, client);
}

// Answers on ipc:// are never held: a server answers the workers of its own host there, and
// they must not wait for its thread to hand them over; nor are a ROUTER's where answers are not
// held (an aggregator's, and every Van's by default).
TEST(SendWindow, AnswersOnIpcAreNotHeldBack) {
  ZmqVanOptions o = Windowed();
  o.hold_answers = true;
  // In a directory of its own, removed after: a fixed name in /tmp stayed behind and was shared
  // by two runs of the suite at once.
  const TempDir dir;
  ZmqVan server(o);
  const std::string endpoint = "ipc://" + dir.File("server.ipc");
  ASSERT_TRUE(server.Bind("tcp://127.0.0.1:0").ok());
  ASSERT_TRUE(server.Bind(endpoint).ok());
  ZmqVan client;
  ASSERT_TRUE(client.Connect("srv", endpoint).ok());
  const std::string peer = PeerOfHello(client, server);
  // Nobody reads yet: a held connection would fill after one message.
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(server.Send(Ranked(peer, Nth(i), kMessages - i)).ok());
  }
  EXPECT_EQ(server.held(), 0u);
  ExpectInTheOrderSent(client);
}

TEST(SendWindow, AnswersAreNotHeldBackUnlessAsked) {
  SlowServer server(Windowed());
  ASSERT_NE(server.link, nullptr);
  ZmqVan client;
  ASSERT_TRUE(client.Connect("srv", server.link->endpoint()).ok());
  const std::string peer = PeerOfHello(client, server.van);
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(server.van.Send(Ranked(peer, Nth(i), kMessages - i)).ok());
  }
  EXPECT_EQ(server.van.held(), 0u);
  ExpectInTheOrderSent(client);
}

TEST(SendWindow, ClosingTheVanHandsOverWhatItHeld) {
  SlowServer server;
  ASSERT_NE(server.link, nullptr);
  {
    ZmqVanOptions o = Windowed();
    o.linger_ms = 20000;
    ZmqVan client(o);
    ASSERT_TRUE(client.Connect("srv", server.link->endpoint()).ok());
    for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(client.Send(Ranked("srv", Nth(i), 1)).ok());
    ASSERT_GT(client.held(), 0u) << "nothing held back: nothing is tested";
  }
  ExpectInTheOrderSent(server.van);
}

TEST(SendWindow, WithoutAWindowEverythingGoesInTheOrderSent) {
  SlowServer server;
  ASSERT_NE(server.link, nullptr);
  ZmqVan client;
  ASSERT_TRUE(client.Connect("srv", server.link->endpoint()).ok());
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(client.Send(Ranked("srv", Nth(i), kMessages - i)).ok());
  }
  EXPECT_EQ(client.held(), 0u);
  ExpectInTheOrderSent(server.van);
}

}  // namespace
}  // namespace psformer::testing
