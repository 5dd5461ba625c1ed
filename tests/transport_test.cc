// ZmqVan over loopback TCP and ipc: whole multipart messages both ways, routing replies back to
// the sender, and zero-copy sends that release the caller's buffer once sent.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/transport/zmq_van.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

RawMessage RecvOne(Van& van) {
  for (int i = 0; i < 100; ++i) {
    auto r = van.Recv(100);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok() && r->has_value()) return std::move(**r);
  }
  ADD_FAILURE() << "no message within 10 s";
  return {};
}

void RoundTrip(const std::string& bind_endpoint) {
  ZmqVan server, client;
  auto bound = server.Bind(bind_endpoint);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  ASSERT_TRUE(client.Connect("srv", *bound).ok());

  std::vector<float> big(300000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  auto owner = std::make_shared<std::vector<float>>(big);
  std::weak_ptr<std::vector<float>> watch = owner;
  RawMessage out;
  out.peer = "srv";
  out.frames.push_back(Frame::Copy("header", 6));
  AppendViewFrames(owner->data(), owner->size() * 4, 64 * 1024, 4, owner, &out.frames);
  const size_t frames = out.frames.size();
  owner.reset();
  ASSERT_TRUE(client.Send(std::move(out)).ok());

  RawMessage in = RecvOne(server);
  ASSERT_EQ(in.frames.size(), frames);
  EXPECT_EQ(in.frames[0].bytes(), "header");
  std::string joined;
  for (size_t i = 1; i < in.frames.size(); ++i) joined += in.frames[i].bytes();
  ASSERT_EQ(joined.size(), big.size() * 4);
  EXPECT_EQ(std::memcmp(joined.data(), big.data(), joined.size()), 0);
  // Once delivered, the transport has let go of the sender's buffer.
  for (int i = 0; i < 200 && !watch.expired(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(watch.expired());

  RawMessage reply;
  reply.peer = in.peer;  // the routing id of the client.
  reply.frames.push_back(Frame::Copy("pong", 4));
  ASSERT_TRUE(server.Send(std::move(reply)).ok());
  RawMessage back = RecvOne(client);
  EXPECT_EQ(back.peer, "srv");
  ASSERT_EQ(back.frames.size(), 1u);
  EXPECT_EQ(back.frames[0].bytes(), "pong");
}

TEST(ZmqVan, MultipartRoundTripOverTcp) { RoundTrip("tcp://127.0.0.1:0"); }

TEST(ZmqVan, MultipartRoundTripOverIpc) {
  testing::TempDir dir;
  RoundTrip("ipc://" + dir.File("van.sock"));
}

TEST(ZmqVan, ReportsUnknownPeersAndBadEndpoints) {
  ZmqVan van;
  RawMessage m;
  m.peer = "nobody";
  m.frames.push_back(Frame::Copy("x", 1));
  EXPECT_FALSE(van.Send(m).ok());
  ASSERT_TRUE(van.Bind("tcp://127.0.0.1:0").ok());
  EXPECT_FALSE(van.Send(m).ok());  // ROUTER_MANDATORY: an unknown routing id is an error.
  ZmqVan other;
  EXPECT_FALSE(other.Bind("bogus://x").ok());
  EXPECT_FALSE(other.Connect("", "tcp://127.0.0.1:1").ok());
  auto r = other.Recv(0);
  EXPECT_FALSE(r.ok());  // nothing bound or connected.
}

}  // namespace
}  // namespace psformer
