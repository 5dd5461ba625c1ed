// A running server fed malformed, truncated, oversized, wrong-shard, wrong-job, bad-checksum,
// foreign, stale and future messages: each answered with ERROR naming its reason, counted, and
// the server keeps serving with its parameters unchanged. Requests it cannot carry out (a
// checkpoint without a run directory, a rollback to a checkpoint it cannot load) are refused
// with reasons of their own.
#include "pserver/wire/wire_message.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kTotal = 1000;

class PserverValidation : public ::testing::Test {
 protected:
  PserverValidation() : group_(PsConfig(2, 1, proto::ClusterConfig::BSP), kTotal), grad_(kTotal, 0.5f) {
    EXPECT_TRUE(attacker_.Connect("server", group_.endpoints()[0]).ok());
  }

  proto::Header Push() const {
    proto::Header h = FromWorker0(proto::PUSH, 1);
    h.set_dtype(proto::FLOAT32);
    h.set_begin(0);
    h.set_end(kTotal);
    h.set_target_tokens(3);
    return h;
  }
  RawMessage Encode(const proto::Header& h) {
    std::vector<Frame> payload;
    AppendViewFrames(grad_.data(), grad_.size() * 4, 1024, 4, nullptr, &payload);
    return EncodeMessage("server", h, std::move(payload));
  }
  // Sends `raw` and returns the reason of the ERROR that must come back.
  RejectReason Exchange(RawMessage raw) {
    raw.peer = "server";
    EXPECT_TRUE(attacker_.Send(std::move(raw)).ok());
    const WireMessage msg = NextReply(attacker_);
    if (msg.header.type() != proto::ERROR) {
      ADD_FAILURE() << "expected ERROR, got " << proto::MessageType_Name(msg.header.type());
      return RejectReason::kNone;
    }
    EXPECT_FALSE(msg.header.error().empty());
    return static_cast<RejectReason>(msg.header.reject_reason());
  }

  ServerGroup group_;
  ZmqVan attacker_;
  std::vector<float> grad_;  // (kTotal)
};

TEST_F(PserverValidation, RefusesBadMessagesCountsThemAndKeepsServing) {
  RawMessage garbage;
  garbage.frames.push_back(Frame::Copy("\x0a\xff\xff\xff\xff\xff", 6));
  EXPECT_EQ(Exchange(std::move(garbage)), RejectReason::kMalformedHeader);
  RawMessage huge;
  huge.frames.push_back(Frame::Own(std::string(100000, '\x08')));
  EXPECT_EQ(Exchange(std::move(huge)), RejectReason::kMalformedHeader);
  RawMessage empty_header;
  empty_header.frames.push_back(Frame());
  EXPECT_EQ(Exchange(std::move(empty_header)), RejectReason::kWrongJob);  // all-default header: job 0.

  RawMessage truncated = Encode(Push());
  truncated.frames.pop_back();
  EXPECT_EQ(Exchange(std::move(truncated)), RejectReason::kBadPayload);
  RawMessage oversized = Encode(Push());
  oversized.frames.push_back(Frame::Own(std::string(1 << 20, '\0')));
  EXPECT_EQ(Exchange(std::move(oversized)), RejectReason::kBadPayload);
  RawMessage flipped = Encode(Push());
  std::string bytes(flipped.frames[1].bytes());
  bytes[0] ^= 1;
  flipped.frames[1] = Frame::Own(bytes);
  EXPECT_EQ(Exchange(std::move(flipped)), RejectReason::kBadChecksum);

  proto::Header h = Push();
  h.set_shard(1);
  EXPECT_EQ(Exchange(Encode(h)), RejectReason::kWrongShard);
  h = Push();
  h.set_job_id(kJobId + 1);  // a client of another job.
  EXPECT_EQ(Exchange(Encode(h)), RejectReason::kWrongJob);
  h = Push();
  h.set_sender_id(7);  // no such worker.
  EXPECT_EQ(Exchange(Encode(h)), RejectReason::kUnknownSender);
  h = Push();
  h.set_end(kTotal - 1);
  EXPECT_EQ(Exchange(Encode(h)), RejectReason::kBadRange);
  h = Push();
  h.set_type(static_cast<proto::MessageType>(99));
  EXPECT_EQ(Exchange(Encode(h)), RejectReason::kUnknownType);
  h = Push();
  h.set_step(5);
  EXPECT_EQ(Exchange(Encode(h)), RejectReason::kFutureStep);
  h = Push();
  h.set_type(proto::PULL);
  h.set_step(3);  // parameters after a step this worker never pushed.
  EXPECT_EQ(Exchange(EncodeMessage("server", h, {})), RejectReason::kFutureStep);

  // Worker 1 restarts as incarnation 2; a message from its previous life is refused.
  h = Push();
  h.set_type(proto::HELLO);
  h.set_sender_id(1);
  h.set_incarnation(2);
  ASSERT_TRUE(attacker_.Send(EncodeMessage("server", h, {})).ok());
  for (int i = 0; i < 100; ++i) {
    auto r = attacker_.Recv(100);
    if (r.ok() && r->has_value()) break;
  }
  h = Push();
  h.set_sender_id(1);
  h.set_incarnation(1);
  EXPECT_EQ(Exchange(Encode(h)), RejectReason::kStaleIncarnation);

  const ParameterServerStats& stats = group_.server(0).stats();
  EXPECT_EQ(stats.rejected.Total(), 14u);  // every Exchange above.
  EXPECT_EQ(stats.rejected.Get(RejectReason::kBadPayload), 2u);
  EXPECT_EQ(stats.rejected.Get(RejectReason::kFutureStep), 2u);
  EXPECT_EQ(stats.pushes_accepted.load(), 0u);

  // Still serving, parameters as initialised, and a real step goes through.
  auto w0 = MakeClient(group_, kTotal, 0), w1 = MakeClient(group_, kTotal, 1, proto::FLOAT32, 2);
  std::vector<float> params(kTotal), init(kTotal);
  for (size_t i = 0; i < kTotal; ++i) init[i] = InitValue(i);
  ASSERT_TRUE(w0->Wait(*w0->Pull(0, params.data())).ok());
  EXPECT_TRUE(BitwiseEqual(params, init));
  // Both workers push step t, then worker 0 pulls its parameters.
  const auto step = [&](int64_t t) {
    const auto g0 = Gradient(0, t, kTotal), g1 = Gradient(1, t, kTotal);
    ASSERT_TRUE(w0->Wait(*w0->Push(t, g0.data(), Tokens(0, t), 0)).ok());
    ASSERT_TRUE(w1->Wait(*w1->Push(t, g1.data(), Tokens(1, t), 0)).ok());
    ASSERT_TRUE(w0->Wait(*w0->Pull(t, params.data())).ok());
  };
  ASSERT_NO_FATAL_FAILURE(step(1));
  ReferenceTrainer ref(PsConfig(2, 1, proto::ClusterConfig::BSP), kTotal);
  ref.Step(1);
  EXPECT_TRUE(BitwiseEqual(params, ref.params()));
  // The state before the last step is kept for a restarted worker: a pull of step 0 still gets it.
  ASSERT_TRUE(w0->Wait(*w0->Pull(0, params.data())).ok());
  EXPECT_TRUE(BitwiseEqual(params, init));
  // Once step 2 is applied, step 0 is stale: refused and reported to the client.
  ASSERT_NO_FATAL_FAILURE(step(2));
  Status stale = w0->Wait(*w0->Pull(0, params.data()));
  EXPECT_FALSE(stale.ok());
  EXPECT_NE(stale.message().find("stale step"), std::string::npos) << stale.message();
}

TEST_F(PserverValidation, CheckpointWithoutARunDirectoryIsRefusedForThatReason) {
  proto::Header h = Push();
  h.set_type(proto::CHECKPOINT);
  h.set_sender_role(proto::COORDINATOR);
  h.set_step(0);
  EXPECT_EQ(Exchange(EncodeMessage("server", h, {})), RejectReason::kNoRunDirectory);
  EXPECT_EQ(group_.server(0).stats().rejected.Get(RejectReason::kNoRunDirectory), 1u);
  EXPECT_EQ(group_.server(0).stats().checkpoints_written.load(), 0u);
}

// The supervisor restarts a server whose Run failed; the worker that asked learns why.
TEST(PserverRecovery, RollbackToACheckpointThatCannotBeLoadedIsRefusedAndEndsRun) {
  TempDir dir;  // a run directory without any checkpoint.
  ParameterServerOptions o;
  o.config = PsConfig(1, 1, proto::ClusterConfig::BSP);
  o.parameter_count = kTotal;
  o.job_id = kJobId;
  o.run_dir = dir.path().string();
  o.poll_ms = 20;
  auto server = ParameterServer::Create(std::move(o), std::make_unique<ZmqVan>());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Status run_status;
  std::thread runner([&] { run_status = (*server)->Run(); });
  ZmqVan worker;
  ASSERT_TRUE(worker.Connect("server", (*server)->endpoint()).ok());
  proto::Header h = FromWorker0(proto::ROLLBACK, 3);
  h.set_epoch(1);
  ASSERT_TRUE(worker.Send(EncodeMessage("server", h, {})).ok());
  WireMessage reply;
  for (int i = 0; i < 100 && reply.header.type() == proto::MESSAGE_TYPE_UNSPECIFIED; ++i) {
    auto raw = worker.Recv(100);
    if (raw.ok() && raw->has_value()) {
      EXPECT_FALSE(ParseMessage(std::move(**raw), &reply));
    }
  }
  (*server)->Stop();  // only in case Run did not end by itself, which the checks below catch.
  runner.join();
  EXPECT_EQ(reply.header.type(), proto::ERROR);
  EXPECT_EQ(static_cast<RejectReason>(reply.header.reject_reason()), RejectReason::kRestoreFailed);
  EXPECT_FALSE(run_status.ok());
  EXPECT_NE(run_status.message().find("rollback to step 3"), std::string::npos) << run_status.ToString();
  EXPECT_EQ((*server)->stats().rollbacks.load(), 0u);
}

}  // namespace
}  // namespace psformer::testing
