// ZmqVan over loopback TCP and ipc: whole multipart messages both ways, routing replies back to
// the sender, and zero-copy sends that release the caller's buffer once sent. With CURVE: the
// job's client talks, a client without keys or with another client keypair is refused (its
// messages never arrive) while the server goes on serving the job's client, and a refused
// client's Send waiting for room ends when asked to stop; keys in text form.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "common/transport/curve_keys.h"
#include "common/transport/faulty_van.h"
#include "common/transport/wakeup.h"
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

// A Recv that waits for replies ends as soon as its wake descriptor is notified (a worker's client
// thread hears of a queued command at once), also through a decorator that waits in rounds; a
// message waiting is still returned first, and once drained the descriptor no longer ends a wait.
TEST(ZmqVan, AWakeEndsTheWaitAndAMessageComesFirst) {
  for (const bool decorated : {false, true}) {
    SCOPED_TRACE(decorated ? "through a FaultyVan" : "ZmqVan");
    auto zmq_server = std::make_unique<ZmqVan>();
    ZmqVan client;
    auto bound = zmq_server->Bind("tcp://127.0.0.1:0");
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    ASSERT_TRUE(client.Connect("srv", *bound).ok());
    std::unique_ptr<Van> server = std::move(zmq_server);
    // A FaultyVan that passes everything through still waits in rounds of its own.
    if (decorated) server = std::make_unique<FaultyVan>(std::move(server), FaultyVanOptions{});
    Wakeup wakeup;
    ASSERT_GE(wakeup.fd(), 0);
    server->WakeOn(wakeup.fd());

    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    std::thread notifier([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      wakeup.Notify();
    });
    auto woken = server->Recv(60000);
    notifier.join();
    ASSERT_TRUE(woken.ok()) << woken.status().ToString();
    EXPECT_FALSE(woken->has_value());
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));  // not the minute it was given

    // Still readable (the Van never drains it): a message waiting comes first all the same.
    RawMessage ping;
    ping.peer = "srv";
    ping.frames.push_back(Frame::Copy("ping", 4));
    ASSERT_TRUE(client.Send(std::move(ping)).ok());
    std::optional<RawMessage> got;  // each Recv ends at once, readable as it is: tried for 10 s
    for (const auto give_up = Clock::now() + std::chrono::seconds(10); !got && Clock::now() < give_up;) {
      auto r = server->Recv(100);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (r->has_value()) got = std::move(**r);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->frames[0].bytes(), "ping");

    // Drained, it ends nothing: the wait runs its course.
    wakeup.Drain();
    const auto quiet = Clock::now();
    auto timed_out = server->Recv(200);
    ASSERT_TRUE(timed_out.ok());
    EXPECT_FALSE(timed_out->has_value());
    EXPECT_GE(Clock::now() - quiet, std::chrono::milliseconds(190));
  }
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

// A job's server on loopback, and another job's keys to be refused with.
class ZmqVanRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    auto job = GenerateCurveKeys();
    auto foreign = GenerateCurveKeys();
    ASSERT_TRUE(job.ok() && foreign.ok());
    keys_ = *job;
    other_ = *foreign;
    server_ = std::make_unique<ZmqVan>(WithKeys(keys_.ForServer()));
    auto bound = server_->Bind("tcp://127.0.0.1:0");
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    endpoint_ = *bound;
  }

  // Another job's client keypair, knowing this server's public key.
  CurveKeys Stranger() const {
    CurveKeys stranger = other_;
    stranger.server_public = keys_.server_public;
    return stranger.ForClient();
  }

  // Foreign clients have sent: the server refuses at least one and receives nothing from them
  // (for `settle_ms` more), then serves a client of the job.
  void ExpectRefusedAndTheJobServed(int settle_ms) {
    for (int i = 0; i < 20 && server_->refused_clients() == 0; ++i) {
      EXPECT_FALSE(RecvWithin(*server_, 100).has_value()) << "a foreign client's message arrived";
    }
    EXPECT_GE(server_->refused_clients(), 1u);
    EXPECT_FALSE(RecvWithin(*server_, settle_ms).has_value()) << "a foreign client's message arrived";
    ZmqVan client(WithKeys(keys_.ForClient()));
    ASSERT_TRUE(client.Connect("srv", endpoint_).ok());
    ASSERT_NO_FATAL_FAILURE(Exchange(*server_, client, "job member", "welcome"));
  }

  CurveKeys keys_, other_;
  std::unique_ptr<ZmqVan> server_;
  std::string endpoint_;
};

TEST_F(ZmqVanRefusal, ForeignClientsAreRefusedAndTheJobsClientIsStillServed) {
  // No keys at all: the CURVE handshake never completes, nothing arrives.
  // A refused client's Send may fail (libzmq dropped its connection) or queue: either way,
  // nothing reaches the server.
  ZmqVanOptions plain;
  plain.linger_ms = 0;
  plain.send_timeout_ms = 1000;
  ZmqVan no_keys(plain);
  ASSERT_TRUE(no_keys.Connect("srv", endpoint_).ok());
  no_keys.Send(Text("srv", "let me in")).ok();
  // Another job's client keypair, even knowing this server's public key: the ZAP handler refuses it.
  ZmqVan wrong_client(WithKeys(Stranger()));
  ASSERT_TRUE(wrong_client.Connect("srv", endpoint_).ok());
  wrong_client.Send(Text("srv", "let me in too")).ok();
  // The right client keys but another server key: the client refuses the server (and would
  // never talk to an impostor).
  CurveKeys wrong_server = keys_.ForClient();
  wrong_server.server_public = other_.server_public;
  ZmqVan misled(WithKeys(wrong_server));
  ASSERT_TRUE(misled.Connect("srv", endpoint_).ok());
  misled.Send(Text("srv", "hello?")).ok();

  ASSERT_NO_FATAL_FAILURE(ExpectRefusedAndTheJobServed(1000));
  EXPECT_FALSE(RecvWithin(no_keys, 0).has_value());
  EXPECT_FALSE(RecvWithin(wrong_client, 0).has_value());
  EXPECT_FALSE(RecvWithin(misled, 0).has_value());
}

std::atomic<int> g_interruptions{0};

// A refused client's Send waits for room that never comes (libzmq dropped its connection): a
// signal reaching the waiting thread does not end the wait, and stop_waiting does, at once,
// long before send_timeout_ms (what lets a worker asked to stop while its HELLO waits exit).
TEST_F(ZmqVanRefusal, ASendWaitingForRoomEndsWhenAskedToStopAndNotOnASignal) {
  ZmqVanOptions o = WithKeys(Stranger());
  o.send_timeout_ms = 120000;
  std::atomic<bool> stop{false};
  o.stop_waiting = [&stop] { return stop.load(); };
  ZmqVan refused(o);
  ASSERT_TRUE(refused.Connect("srv", endpoint_).ok());

  struct sigaction count = {}, old = {};
  count.sa_handler = [](int) { g_interruptions.fetch_add(1); };
  sigemptyset(&count.sa_mask);  // no SA_RESTART: the wait sees EINTR
  ASSERT_EQ(sigaction(SIGUSR1, &count, &old), 0);
  g_interruptions.store(0);
  // Messages queue until libzmq, refused, drops the connection; from then on a Send waits.
  using Clock = std::chrono::steady_clock;
  std::atomic<int64_t> waiting_since{0};  // when the Send in progress began (ns), 0 = none
  const pthread_t sender = pthread_self();
  std::thread asker([&] {
    for (int i = 0; i < 400; ++i) {  // at most ~20 s for a Send to wait 200 ms
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int64_t since = waiting_since.load();
      if (since != 0 && Clock::now().time_since_epoch().count() - since > 200'000'000) break;
    }
    for (int i = 0; i < 3; ++i) {
      pthread_kill(sender, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    stop.store(true);
  });
  Status sent = Status::Ok();
  for (int i = 0; i < 100 && sent.ok(); ++i) {
    waiting_since.store(Clock::now().time_since_epoch().count());
    sent = refused.Send(Text("srv", "let me in"));
    waiting_since.store(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  asker.join();
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_GE(server_->refused_clients(), 1u);
  EXPECT_EQ(g_interruptions.load(), 3);
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.message().find("asked to stop while waiting for room to queue a message to srv"), std::string::npos)
      << sent.ToString();
}

// A signal that reaches the authentication handler's thread must not stop it: without a
// handler, libzmq would admit any client that knows the server's public key.
TEST_F(ZmqVanRefusal, ASignalDoesNotStopTheAuthenticationHandler) {
  {
    ZmqVan client(WithKeys(keys_.ForClient()));  // answered: the handler's thread is running
    ASSERT_TRUE(client.Connect("srv", endpoint_).ok());
    ASSERT_NO_FATAL_FAILURE(Exchange(*server_, client, "before", "the signals"));
  }
  // The handler's thread, by the name it takes once it runs.
  pid_t handler = 0;
  for (int i = 0; i < 100 && handler == 0; ++i) {
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      if (testing::ReadTextFile(task.path() / "comm") == "psf-zap\n") {
        handler = std::stoi(task.path().filename().string());
      }
    }
    if (handler == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(handler, 0) << "no thread named psf-zap";
  struct sigaction count = {}, old = {};
  count.sa_handler = [](int) { g_interruptions.fetch_add(1); };
  sigemptyset(&count.sa_mask);  // no SA_RESTART: a wait the signal reaches sees EINTR
  ASSERT_EQ(sigaction(SIGUSR1, &count, &old), 0);
  g_interruptions.store(0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(syscall(SYS_tgkill, getpid(), handler, SIGUSR1), 0) << "the handler's thread has ended";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ZmqVan stranger(WithKeys(Stranger()));
  ASSERT_TRUE(stranger.Connect("srv", endpoint_).ok());
  stranger.Send(Text("srv", "let me in")).ok();
  ASSERT_NO_FATAL_FAILURE(ExpectRefusedAndTheJobServed(500));
  EXPECT_EQ(g_interruptions.load(), 0);
  sigaction(SIGUSR1, &old, nullptr);
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
