// How a server answers what an unreliable transport makes of a client's requests (the client
// retries, FaultyVan duplicates, delays and reorders): a repeated PUSH is ACKed as a duplicate
// and applied once, a repeated PULL is answered again with the same parameters, a PULL that
// overtook its PUSH is refused as a future step and answered once retried after it, and a PULL
// that arrives after the job moved on is refused as a stale step. Clients must treat the last two
// ERRORs as answers to requests no longer in flight (pserver/client/ps_client.h).
#include <atomic>
#include <thread>

#include "common/bfloat16.h"
#include "common/transport/faulty_van.h"
#include "common/transport/forwarding_van.h"
#include "common/transport/zmq_van.h"
#include "pserver/wire/wire_message.h"
#include "tests/pserver_test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kTotal = 600;

class PserverRetry : public ::testing::Test {
 protected:
  PserverRetry() : group_(PsConfig(1, 1, proto::ClusterConfig::BSP), kTotal), grad_(kTotal, 0.25f) {}

  // A worker-0 request; PUSH carries grad_.
  RawMessage Request(proto::MessageType type, int64_t step, uint64_t sequence) {
    proto::Header h = FromWorker0(type, step);
    h.set_sequence(sequence);
    h.set_begin(0);
    h.set_end(kTotal);
    std::vector<Frame> payload;
    if (type == proto::PUSH) {
      h.set_dtype(proto::FLOAT32);
      h.set_target_tokens(5);
      AppendViewFrames(grad_.data(), grad_.size() * 4, 1024, 4, nullptr, &payload);
    }
    return EncodeMessage("server", h, std::move(payload));
  }

  std::unique_ptr<Van> Connected(std::unique_ptr<Van> van) {
    EXPECT_TRUE(van->Connect("server", group_.endpoints()[0]).ok());
    return van;
  }

  static std::vector<float> Params(const WireMessage& msg) {
    std::vector<float> out(kTotal);
    CopyPayloadAsFloats(msg, out.data());
    return out;
  }

  ServerGroup group_;
  std::vector<float> grad_;  // (kTotal)
};

TEST_F(PserverRetry, RepeatedPushIsAcknowledgedAsDuplicateAndRepeatedPullIsAnsweredAgain) {
  auto van = Connected(std::make_unique<ZmqVan>());
  ASSERT_TRUE(van->Send(Request(proto::PUSH, 1, 1)).ok());
  WireMessage ack = NextReply(*van);
  EXPECT_EQ(ack.header.type(), proto::ACK);
  EXPECT_FALSE(ack.header.duplicate());
  ASSERT_TRUE(van->Send(Request(proto::PUSH, 1, 1)).ok());  // the retry of a push whose ACK was lost.
  WireMessage again = NextReply(*van);
  EXPECT_EQ(again.header.type(), proto::ACK);
  EXPECT_TRUE(again.header.duplicate());
  EXPECT_EQ(again.header.sequence(), 1u);

  ASSERT_TRUE(van->Send(Request(proto::PULL, 1, 2)).ok());
  WireMessage first = NextReply(*van);
  ASSERT_EQ(first.header.type(), proto::PARAMS) << first.header.error();
  ASSERT_TRUE(van->Send(Request(proto::PULL, 1, 2)).ok());  // the retry of a pull whose answer was lost.
  WireMessage second = NextReply(*van);
  ASSERT_EQ(second.header.type(), proto::PARAMS) << second.header.error();
  EXPECT_EQ(second.header.sequence(), 2u);
  EXPECT_EQ(Params(first), Params(second));
  EXPECT_EQ(group_.server(0).stats().updates.load(), 1u);
  EXPECT_EQ(group_.server(0).stats().duplicates.load(), 1u);
}

TEST_F(PserverRetry, EveryMessageSentTwiceStillAppliesEachStepOnce) {
  FaultyVanOptions twice;
  twice.duplicate_fraction = 1.0;
  auto van = Connected(std::make_unique<FaultyVan>(std::make_unique<ZmqVan>(), twice));
  std::vector<float> last;
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(van->Send(Request(proto::PUSH, step, 2 * step)).ok());
    WireMessage a = NextReply(*van), b = NextReply(*van);
    EXPECT_EQ(a.header.type(), proto::ACK);
    EXPECT_EQ(b.header.type(), proto::ACK);
    EXPECT_NE(a.header.duplicate(), b.header.duplicate()) << "one ACK applies, the other is the duplicate";
    ASSERT_TRUE(van->Send(Request(proto::PULL, step, 2 * step + 1)).ok());
    WireMessage p = NextReply(*van), q = NextReply(*van);
    ASSERT_EQ(p.header.type(), proto::PARAMS) << p.header.error();
    ASSERT_EQ(q.header.type(), proto::PARAMS) << q.header.error();
    EXPECT_EQ(Params(p), Params(q));
    EXPECT_NE(Params(p), last);
    last = Params(p);
  }
  EXPECT_EQ(group_.server(0).stats().updates.load(), 3u);
  EXPECT_EQ(group_.server(0).stats().duplicates.load(), 3u);
  EXPECT_EQ(group_.server(0).stats().rejected.Total(), 0u);
}

// A pull may overtake the (last pieces of the) push of its own step on the wire: it is held and
// answered once that push is in and applied. A pull two steps ahead is refused. A late pull one
// step behind is answered from the state the server keeps for a restarted worker; two behind is
// stale.
TEST_F(PserverRetry, PullAheadOfItsPushWaitsForItAndALatePullIsStale) {
  auto van = Connected(std::make_unique<ZmqVan>());
  ASSERT_TRUE(van->Send(Request(proto::PULL, 2, 1)).ok());
  WireMessage ahead = NextReply(*van);
  ASSERT_EQ(ahead.header.type(), proto::ERROR);
  EXPECT_EQ(static_cast<RejectReason>(ahead.header.reject_reason()), RejectReason::kFutureStep);
  // Reordered: the pull of step 1 overtook the push of step 1.
  ASSERT_TRUE(van->Send(Request(proto::PULL, 1, 2)).ok());
  ASSERT_TRUE(van->Send(Request(proto::PUSH, 1, 3)).ok());
  WireMessage ack = NextReply(*van), early = NextReply(*van);
  EXPECT_EQ(ack.header.type(), proto::ACK);
  ASSERT_EQ(early.header.type(), proto::PARAMS) << early.header.error();
  EXPECT_EQ(early.header.sequence(), 2u);
  const std::vector<float> after_one = Params(early);
  // Step 2 goes through; then a delayed copy of the pull of step 1 arrives: the kept state.
  ASSERT_TRUE(van->Send(Request(proto::PUSH, 2, 4)).ok());
  EXPECT_EQ(NextReply(*van).header.type(), proto::ACK);
  ASSERT_TRUE(van->Send(Request(proto::PULL, 1, 2)).ok());
  WireMessage late = NextReply(*van);
  ASSERT_EQ(late.header.type(), proto::PARAMS) << late.header.error();
  EXPECT_EQ(Params(late), after_one);
  // After step 3, step 1 is gone.
  ASSERT_TRUE(van->Send(Request(proto::PULL, 2, 5)).ok());
  EXPECT_EQ(NextReply(*van).header.type(), proto::PARAMS);
  ASSERT_TRUE(van->Send(Request(proto::PUSH, 3, 6)).ok());
  EXPECT_EQ(NextReply(*van).header.type(), proto::ACK);
  ASSERT_TRUE(van->Send(Request(proto::PULL, 1, 2)).ok());
  WireMessage stale = NextReply(*van);
  ASSERT_EQ(stale.header.type(), proto::ERROR);
  EXPECT_EQ(static_cast<RejectReason>(stale.header.reject_reason()), RejectReason::kStaleStep);
  EXPECT_EQ(stale.header.sequence(), 2u);  // names the request it answers.
  EXPECT_EQ(group_.server(0).stats().updates.load(), 3u);
}

// A client of `servers` that resends after 50 ms and gives up after `timeout_ms`.
PsClientOptions RetryOptions(const std::vector<std::string>& servers, int timeout_ms) {
  PsClientOptions o;
  o.job_id = kJobId;
  o.servers = servers;
  o.parameter_count = kTotal;
  o.frame_bytes = 1024;
  o.timeout_ms = timeout_ms;
  o.retry_ms = 50;
  return o;
}

// A Van that damages one byte of the first `damage` payloads it receives (the client checks a
// pull's payload in the pass that copies it into place).
class DamagingVan : public Van {
 public:
  explicit DamagingVan(int damage) : inner_(std::make_unique<ZmqVan>()), left_(damage) {}
  StatusOr<std::string> Bind(const std::string& endpoint) override { return inner_->Bind(endpoint); }
  Status Connect(const std::string& peer, const std::string& endpoint) override {
    return inner_->Connect(peer, endpoint);
  }
  Status Send(RawMessage message) override { return inner_->Send(std::move(message)); }
  StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) override {
    auto r = inner_->Recv(timeout_ms);
    if (r.ok() && r->has_value() && (*r)->frames.size() > 1 && left_ > 0) {
      --left_;
      RawMessage& m = **r;
      std::string bytes(m.frames.back().bytes());
      bytes[bytes.size() / 2] ^= 0x01;
      m.frames.back() = Frame::Own(bytes);
    }
    return r;
  }

 private:
  std::unique_ptr<Van> inner_;
  int left_;
};

// A pull whose reply arrives damaged is not taken: the client counts it as a bad checksum, asks
// again, and ends with the server's parameters, not the damaged bytes it had copied.
TEST_F(PserverRetry, ADamagedPullReplyIsRefusedAndAskedForAgain) {
  auto client = PsClient::Create(RetryOptions(group_.endpoints(), 20000), std::make_unique<DamagingVan>(1));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<float> params(kTotal, -1.0f);
  ASSERT_TRUE((*client)->Wait(*(*client)->Pull(0, params.data())).ok());
  EXPECT_EQ((*client)->rejected_replies().Get(RejectReason::kBadChecksum), 1u);
  for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(params[i], InitValue(i)) << i;
}

// The same for bf16 pulls, whose check is now made in the copy too: landing as they came (for a
// device to widen) and widened on the host.
TEST_F(PserverRetry, ADamagedBf16PullReplyIsRefusedAndAskedForAgain) {
  for (const bool as_bf16 : {true, false}) {
    auto client = PsClient::Create(RetryOptions(group_.endpoints(), 20000), std::make_unique<DamagingVan>(1));
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    std::vector<uint16_t> raw(kTotal, 0xFFFF);
    std::vector<float> widened(kTotal, -1.0f);
    const auto pull =
        as_bf16 ? (*client)->PullBf16(0, raw.data()) : (*client)->Pull(0, widened.data(), proto::BFLOAT16);
    ASSERT_TRUE(pull.ok()) << pull.status().ToString();
    ASSERT_TRUE((*client)->Wait(*pull).ok());
    EXPECT_EQ((*client)->rejected_replies().Get(RejectReason::kBadChecksum), 1u) << as_bf16;
    for (uint64_t i = 0; i < kTotal; ++i) {
      const uint16_t want = FloatToBf16(InitValue(i));
      if (as_bf16) {
        ASSERT_EQ(raw[i], want) << i;
      } else {
        ASSERT_EQ(widened[i], Bf16ToFloat(want)) << i;
      }
    }
  }
}

PsClientOptions RefusalOptions(const std::vector<std::string>& servers, int patience_ms) {
  PsClientOptions o = RetryOptions(servers, 60000);
  o.shm_refusal_patience_ms = patience_ms;
  return o;
}

// A server's segment refused on every resend ends the wait once the refusals have gone on past
// the patience (the job's heartbeat timeout), with a message naming the segment and the request,
// instead of resending until timeout_ms (it was for ever in a job: 8 minutes before a kill).
TEST_F(PserverRetry, ASegmentRefusedPastThePatienceEndsTheWaitNamingIt) {
  auto client = PsClient::Create(RefusalOptions(group_.endpoints(), 400), std::make_unique<RefusingVan>(1 << 30));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<float> params(kTotal, -1.0f);
  const auto start = std::chrono::steady_clock::now();
  const Status waited = (*client)->Wait(*(*client)->Pull(0, params.data()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // not timeout_ms
  ASSERT_FALSE(waited.ok());
  EXPECT_TRUE(waited.IsUnavailable()) << waited.ToString();
  EXPECT_NE(waited.message().find(std::string("shared-memory segment ") + RefusingVan::kSegment), std::string::npos)
      << waited.ToString();
  EXPECT_NE(waited.message().find("waiting for PULL of step 0 from shard(s) 0"), std::string::npos)
      << waited.ToString();
  EXPECT_NE(waited.message().find("holds no payload of generation 15"), std::string::npos) << waited.ToString();
  EXPECT_TRUE((*client)->gave_up_on_segment());
  EXPECT_GE((*client)->rejected_replies().Get(RejectReason::kBadSharedMemory), 3u);
}

// A few refusals in a row that end (a sender that died; its restart answers through another
// segment) cost resends only: the pull completes with the server's parameters.
TEST_F(PserverRetry, AFewSegmentRefusalsAreResentAndTheWaitCompletes) {
  auto client = PsClient::Create(RefusalOptions(group_.endpoints(), 3000), std::make_unique<RefusingVan>(3));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<float> params(kTotal, -1.0f);
  const Status waited = (*client)->Wait(*(*client)->Pull(0, params.data()));
  ASSERT_TRUE(waited.ok()) << waited.ToString();
  EXPECT_FALSE((*client)->gave_up_on_segment());
  EXPECT_EQ((*client)->rejected_replies().Get(RejectReason::kBadSharedMemory), 3u);
  for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(params[i], InitValue(i)) << i;
}

// A HELLO nobody answers (the server is not up yet) is resent until timeout_ms, unless the
// process is asked to stop: then Hello gives up at once, so Ctrl-C during start-up does not wait
// out the timeout. The silent "server" receives the HELLOs and never answers.
TEST(PsClientStop, AHelloNobodyAnswersIsGivenUpWhenAskedToStop) {
  ZmqVan silent;
  const StatusOr<std::string> endpoint = silent.Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  std::atomic<bool> stop{false};
  PsClientOptions o;
  o.job_id = kJobId;
  o.servers = {*endpoint};
  o.parameter_count = kTotal;
  o.timeout_ms = 120000;
  o.retry_ms = 20;
  o.stop_requested = [&stop] { return stop.load(); };
  auto client = PsClient::Create(std::move(o));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::thread asker([&] {
    // Asked to stop once the client has sent its HELLO at least twice (it is waiting).
    for (int hellos = 0, i = 0; hellos < 2 && i < 1000; ++i) {
      auto r = silent.Recv(10);
      if (!r.ok() || !r->has_value()) continue;
      WireMessage msg;
      if (!ParseMessage(std::move(**r), &msg) && msg.header.type() == proto::HELLO) ++hellos;
    }
    stop = true;
  });
  const auto start = std::chrono::steady_clock::now();
  const StatusOr<int64_t> hello = (*client)->Hello();
  const auto waited = std::chrono::steady_clock::now() - start;
  asker.join();
  ASSERT_FALSE(hello.ok());
  EXPECT_TRUE(hello.status().IsAborted()) << hello.status().ToString();
  EXPECT_NE(hello.status().message().find("asked to stop"), std::string::npos) << hello.status().ToString();
  EXPECT_LT(waited, std::chrono::seconds(60));  // not the 120 s timeout
}

}  // namespace
}  // namespace psformer::testing
