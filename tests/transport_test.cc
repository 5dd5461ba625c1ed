// ZmqVan over loopback TCP and ipc: whole multipart messages both ways, routing replies back to
// the sender, and zero-copy sends that release the caller's buffer once sent. With CURVE: the
// job's client talks, a client without keys or with another client keypair is refused (its
// messages never arrive) while the server goes on serving the job's client; keys in text form.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/transport/curve_keys.h"
#include "common/transport/zmq_van.h"
#include "tests/test_util.h"
#include "tests/van_test_util.h"

namespace psformer {
namespace {

using testing::RecvOne;

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

RawMessage Text(const std::string& peer, const std::string& text) {
  RawMessage m;
  m.peer = peer;
  m.frames.push_back(Frame::Copy(text));
  return m;
}

// Whatever `van` receives within `ms` milliseconds (nullopt = nothing).
std::optional<RawMessage> RecvWithin(Van& van, int ms) {
  auto r = van.Recv(ms);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : std::nullopt;
}

// `client` sends `request` to "srv" (`server`), which answers `reply`: each arrives as sent.
void Exchange(Van& server, Van& client, const std::string& request, const std::string& reply) {
  ASSERT_TRUE(client.Send(Text("srv", request)).ok());
  RawMessage in = RecvOne(server);
  ASSERT_EQ(in.frames.size(), 1u);
  EXPECT_EQ(in.frames[0].bytes(), request);
  ASSERT_TRUE(server.Send(Text(in.peer, reply)).ok());
  RawMessage back = RecvOne(client);
  ASSERT_EQ(back.frames.size(), 1u);
  EXPECT_EQ(back.frames[0].bytes(), reply);
}

ZmqVanOptions WithKeys(const CurveKeys& keys) {
  ZmqVanOptions o;
  o.curve = keys;
  o.linger_ms = 0;  // a refused client's queued message must not hold up the test's end.
  // A refused client's Send fails (no connection to queue to) instead of blocking.
  o.send_timeout_ms = 1000;
  return o;
}

void CurveRoundTrip(const std::string& bind_endpoint) {
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ZmqVan server(WithKeys(keys->ForServer()));
  ZmqVan client(WithKeys(keys->ForClient()));
  auto bound = server.Bind(bind_endpoint);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  ASSERT_TRUE(client.Connect("srv", *bound).ok());
  ASSERT_NO_FATAL_FAILURE(Exchange(server, client, "ping", "pong"));
  EXPECT_EQ(server.refused_clients(), 0u);
}

TEST(ZmqVanCurve, JobClientTalksOverTcp) { CurveRoundTrip("tcp://127.0.0.1:0"); }

TEST(ZmqVanCurve, JobClientTalksOverIpc) {
  testing::TempDir dir;
  CurveRoundTrip("ipc://" + dir.File("curve.sock"));
}

TEST(ZmqVanCurve, ForeignClientsAreRefusedAndTheJobsClientIsStillServed) {
  auto keys = GenerateCurveKeys();
  auto other = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok() && other.ok());
  ZmqVan server(WithKeys(keys->ForServer()));
  auto bound = server.Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();

  // No keys at all: the CURVE handshake never completes, nothing arrives.
  // A refused client's Send may fail (libzmq dropped its connection) or queue: either way,
  // nothing reaches the server.
  ZmqVanOptions plain;
  plain.linger_ms = 0;
  plain.send_timeout_ms = 1000;
  ZmqVan no_keys(plain);
  ASSERT_TRUE(no_keys.Connect("srv", *bound).ok());
  no_keys.Send(Text("srv", "let me in")).ok();
  // Another job's client keypair, even knowing this server's public key: the ZAP handler refuses it.
  CurveKeys stranger = *other;
  stranger.server_public = keys->server_public;
  ZmqVan wrong_client(WithKeys(stranger.ForClient()));
  ASSERT_TRUE(wrong_client.Connect("srv", *bound).ok());
  wrong_client.Send(Text("srv", "let me in too")).ok();
  // The right client keys but another server key: the client refuses the server (and would
  // never talk to an impostor).
  CurveKeys wrong_server = keys->ForClient();
  wrong_server.server_public = other->server_public;
  ZmqVan misled(WithKeys(wrong_server));
  ASSERT_TRUE(misled.Connect("srv", *bound).ok());
  misled.Send(Text("srv", "hello?")).ok();

  for (int i = 0; i < 20 && server.refused_clients() == 0; ++i) {
    EXPECT_FALSE(RecvWithin(server, 100).has_value()) << "a foreign client's message arrived";
  }
  EXPECT_GE(server.refused_clients(), 1u);
  EXPECT_FALSE(RecvWithin(server, 1000).has_value()) << "a foreign client's message arrived";

  ZmqVan client(WithKeys(keys->ForClient()));
  ASSERT_TRUE(client.Connect("srv", *bound).ok());
  ASSERT_NO_FATAL_FAILURE(Exchange(server, client, "job member", "welcome"));
  EXPECT_FALSE(RecvWithin(no_keys, 0).has_value());
  EXPECT_FALSE(RecvWithin(wrong_client, 0).has_value());
  EXPECT_FALSE(RecvWithin(misled, 0).has_value());
}

TEST(ZmqVanCurve, RefusesToServeOrConnectWithoutItsSecret) {
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok());
  ZmqVan server(WithKeys(keys->ForClient()));  // no server secret.
  EXPECT_FALSE(server.Bind("tcp://127.0.0.1:0").ok());
  ZmqVan client(WithKeys(keys->ForServer()));  // no client secret.
  EXPECT_FALSE(client.Connect("srv", "tcp://127.0.0.1:1").ok());
}

TEST(CurveKeys, TextRoundTripAndSharesWithoutTheOtherSidesSecret) {
  ASSERT_TRUE(CurveAvailable());
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->server_public.size(), 40u);
  EXPECT_NE(keys->server_public, keys->client_public);
  auto decoded = DecodeCurveKeys(EncodeCurveKeys(*keys));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->server_secret, keys->server_secret);
  EXPECT_EQ(decoded->client_secret, keys->client_secret);
  auto server_share = DecodeCurveKeys(EncodeCurveKeys(keys->ForServer()));
  ASSERT_TRUE(server_share.ok()) << server_share.status().ToString();
  EXPECT_TRUE(server_share->client_secret.empty());
  EXPECT_EQ(server_share->server_secret, keys->server_secret);
  auto client_share = DecodeCurveKeys(EncodeCurveKeys(keys->ForClient()));
  ASSERT_TRUE(client_share.ok());
  EXPECT_TRUE(client_share->server_secret.empty());
  EXPECT_EQ(CurveKeyBytes(keys->client_public).size(), 32u);
}

TEST(CurveKeys, MalformedTextIsANamedErrorThatDoesNotEchoTheKeys) {
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok());
  auto r = DecodeCurveKeys("just-one-field");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("PSFORMER_CURVE_KEYS"), std::string::npos) << r.status().message();
  CurveKeys bad = *keys;
  bad.client_public = bad.client_public.substr(0, 39) + ",";  // a fifth field.
  EXPECT_FALSE(DecodeCurveKeys(EncodeCurveKeys(bad)).ok());
  bad = *keys;
  bad.server_secret[3] = '"';  // not a Z85 character.
  r = DecodeCurveKeys(EncodeCurveKeys(bad));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("server secret"), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find(bad.server_secret), std::string::npos);
  bad = *keys;
  bad.server_public.clear();
  r = DecodeCurveKeys(EncodeCurveKeys(bad));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("server public key is missing"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace psformer
