// Framing and validation of wire messages (common/transport/frame.h, pserver/wire/*), checked
// against hand-computed expectations: frame splits, header round trips, one test per RejectReason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/bfloat16.h"
#include "common/crc32c.h"
#include "pserver/wire/message_validator.h"
#include "pserver/wire/wire_message.h"
#include "tests/pserver_test_util.h"

namespace psformer {
namespace {

using testing::MessageHeader;

TEST(Framing, SplitsIntoAlignedFramesCoveringEveryByte) {
  std::vector<uint8_t> bytes(1000);
  std::iota(bytes.begin(), bytes.end(), 0);
  std::vector<Frame> frames;
  AppendViewFrames(bytes.data(), bytes.size(), 250, 4, nullptr, &frames);  // 250 rounds down to 248.
  ASSERT_EQ(frames.size(), 5u);
  size_t at = 0;
  for (const Frame& f : frames) {
    EXPECT_EQ(f.data(), bytes.data() + at);  // views, not copies.
    EXPECT_EQ(f.size() % 4, 0u);
    at += f.size();
  }
  EXPECT_EQ(at, bytes.size());
  frames.clear();
  AppendViewFrames(bytes.data(), bytes.size(), 0, 4, nullptr, &frames);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].size(), 1000u);
  frames.clear();
  AppendViewFrames(bytes.data(), 0, 64, 4, nullptr, &frames);
  EXPECT_TRUE(frames.empty());
}

TEST(Framing, ViewKeepsItsOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(16, 1.5f);
  std::weak_ptr<std::vector<float>> watch = owner;
  std::vector<Frame> frames;
  AppendViewFrames(owner->data(), 64, 16, 4, owner, &frames);
  owner.reset();
  EXPECT_FALSE(watch.expired());
  frames.clear();
  EXPECT_TRUE(watch.expired());
}

TEST(Bfloat16, RoundsToNearestEvenAndWidensExactly) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 lies exactly between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is a tie between 1+2^-7 (odd mantissa) and 1+2^-6 (even): rounds up.
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3f82);
  EXPECT_EQ(Bf16ToFloat(0xc040), -3.0f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
}

// A valid PUSH for shard 1 of [100, 200) from worker 0 of 2, in 4 frames.
struct PushFixture {
  std::vector<float> grad = std::vector<float>(100);
  ServerScope scope{
      .job_id = 42, .workers = 2, .shard = 1, .begin = 100, .end = 200, .piece_bounds = {}, .split_pieces = {}};
  PushFixture() {
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = 0.25f * static_cast<float>(i) - 3.0f;
  }
  proto::Header Header() const {
    proto::Header h = MessageHeader(proto::PUSH, 42, proto::WORKER, 0, 1);
    h.set_step(3);
    h.set_dtype(proto::FLOAT32);
    h.set_begin(100);
    h.set_end(200);
    h.set_target_tokens(17);
    return h;
  }
  RawMessage Encode(const proto::Header& h) const {
    std::vector<Frame> payload;
    AppendViewFrames(grad.data(), grad.size() * 4, 100, 4, nullptr, &payload);
    return EncodeMessage("peer", h, std::move(payload));
  }
  Refusal Check(RawMessage raw) const {
    WireMessage msg;
    if (Refusal v = ParseMessage(std::move(raw), &msg)) return v;
    return ValidateAtServer(msg, scope);
  }
  RejectReason Reason(RawMessage raw) const {
    Refusal v = Check(std::move(raw));
    return v ? v->reason : RejectReason::kNone;
  }
};

TEST(WireMessage, EncodeParseRoundTripKeepsHeaderAndPayload) {
  PushFixture f;
  RawMessage raw = f.Encode(f.Header());
  ASSERT_EQ(raw.frames.size(), 1u + 4u);  // header + 400 bytes in frames of 100.
  WireMessage msg;
  ASSERT_FALSE(ParseMessage(std::move(raw), &msg));
  EXPECT_EQ(msg.header.payload_bytes(), 400u);
  EXPECT_EQ(msg.header.payload_crc32c(), Crc32c(0, f.grad.data(), 400));
  EXPECT_EQ(msg.header.target_tokens(), 17u);
  EXPECT_FALSE(ValidateAtServer(msg, f.scope));
  std::vector<float> out(100);
  CopyPayloadAsFloats(msg, out.data());
  EXPECT_EQ(out, f.grad);
  std::vector<float> acc(100, 1.0f);
  AddPayloadRange(msg, 0, 100, acc.data());
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_EQ(acc[i], 1.0f + f.grad[i]);
  // A range across frames (of 25 elements), added and assigned.
  std::vector<float> part(30, 2.0f);
  AddPayloadRange(msg, 20, 50, part.data());
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(part[i], 2.0f + f.grad[20 + i]) << i;
  AddPayloadRange(msg, 20, 50, part.data(), /*assign=*/true);
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(part[i], f.grad[20 + i]) << i;
}

TEST(WireMessage, Bf16PayloadWidensOnRead) {
  PushFixture f;
  std::vector<uint16_t> half(100);
  FloatsToBf16(f.grad.data(), 100, half.data());
  proto::Header h = f.Header();
  h.set_dtype(proto::BFLOAT16);
  std::vector<Frame> payload;
  AppendViewFrames(half.data(), 200, 64, 2, nullptr, &payload);
  WireMessage msg;
  ASSERT_FALSE(ParseMessage(EncodeMessage("p", h, std::move(payload)), &msg));
  ASSERT_FALSE(ValidateAtServer(msg, f.scope));
  std::vector<float> out(100);
  CopyPayloadAsFloats(msg, out.data());
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(out[i], Bf16ToFloat(half[i]));
  std::vector<float> acc(60, 0.5f);
  AddPayloadRange(msg, 10, 70, acc.data());
  for (size_t i = 0; i < 60; ++i) EXPECT_EQ(acc[i], 0.5f + Bf16ToFloat(half[10 + i])) << i;
}

TEST(Validation, RefusesEachKindOfBadMessage) {
  PushFixture f;
  RawMessage empty;
  EXPECT_EQ(f.Reason(std::move(empty)), RejectReason::kMalformedHeader);
  RawMessage garbage;
  garbage.frames.push_back(Frame::Copy("\xff\xff\xff\xff garbage", 12));
  EXPECT_EQ(f.Reason(std::move(garbage)), RejectReason::kMalformedHeader);
  RawMessage huge;
  huge.frames.push_back(Frame::Own(std::string(kMaxHeaderBytes + 1, 'x')));
  EXPECT_EQ(f.Reason(std::move(huge)), RejectReason::kMalformedHeader);

  proto::Header h = f.Header();
  h.set_type(static_cast<proto::MessageType>(77));
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kUnknownType);
  h = f.Header();
  h.set_type(proto::PARAMS);  // a reply type sent to a server.
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kUnknownType);
  h = f.Header();
  h.set_job_id(43);
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kWrongJob);
  h = f.Header();
  h.set_sender_id(2);  // workers are 0 and 1.
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kUnknownSender);
  h = f.Header();
  h.set_sender_role(proto::SERVER);
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kUnknownSender);
  h = f.Header();
  h.set_shard(0);
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kWrongShard);
  h = f.Header();
  h.set_begin(101);
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kBadRange);
  h = f.Header();
  h.set_step(0);
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kStaleStep);
  h = f.Header();
  h.set_dtype(proto::BFLOAT16);  // 400 bytes for 100 bf16 elements: wrong size.
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kBadPayload);
  h = f.Header();
  h.set_dtype(proto::DTYPE_UNSPECIFIED);
  EXPECT_EQ(f.Reason(f.Encode(h)), RejectReason::kBadPayload);
}

TEST(Validation, RefusesTruncatedOversizedMisframedAndCorruptPayloads) {
  PushFixture f;
  RawMessage truncated = f.Encode(f.Header());
  truncated.frames.pop_back();
  EXPECT_EQ(f.Reason(std::move(truncated)), RejectReason::kBadPayload);

  RawMessage oversized = f.Encode(f.Header());
  oversized.frames.push_back(Frame::Own(std::string(4, '\0')));
  EXPECT_EQ(f.Reason(std::move(oversized)), RejectReason::kBadPayload);

  // Right total size and checksum, but a frame boundary inside an element.
  std::vector<Frame> odd;
  odd.push_back(Frame::Copy(f.grad.data(), 3));
  odd.push_back(Frame::Copy(reinterpret_cast<const uint8_t*>(f.grad.data()) + 3, 397));
  EXPECT_EQ(f.Reason(EncodeMessage("p", f.Header(), std::move(odd))), RejectReason::kBadPayload);

  RawMessage flipped = f.Encode(f.Header());
  std::string bytes(flipped.frames[2].bytes());
  bytes[7] ^= 0x10;
  flipped.frames[2] = Frame::Own(bytes);
  EXPECT_EQ(f.Reason(std::move(flipped)), RejectReason::kBadChecksum);
}

TEST(Validation, ControlMessagesNeedAControlSender) {
  PushFixture f;
  proto::Header h = MessageHeader(proto::CHECKPOINT, 42, proto::WORKER, 0, 1);
  EXPECT_EQ(f.Reason(EncodeMessage("p", h, {})), RejectReason::kUnknownSender);
  h.set_sender_role(proto::SERVER);  // servers never send requests
  h.set_type(proto::SHUTDOWN);
  EXPECT_EQ(f.Reason(EncodeMessage("p", h, {})), RejectReason::kUnknownSender);
  h.set_sender_role(proto::WORKER);  // a worker saying it is done
  EXPECT_EQ(f.Reason(EncodeMessage("p", h, {})), RejectReason::kNone);
  h.set_sender_role(proto::COORDINATOR);
  EXPECT_EQ(f.Reason(EncodeMessage("p", h, {})), RejectReason::kNone);
  std::vector<Frame> stray;
  stray.push_back(Frame::Copy("x", 1));
  EXPECT_EQ(f.Reason(EncodeMessage("p", h, std::move(stray))), RejectReason::kBadPayload);
}

TEST(Validation, ClientChecksParamsReplies) {
  ClientScope scope{42, 2, 200};
  std::vector<float> params(100, 2.0f);
  proto::Header h = MessageHeader(proto::PARAMS, 42, proto::SERVER, 1, 1);
  h.set_dtype(proto::FLOAT32);
  h.set_begin(100);
  h.set_end(200);
  auto check = [&](const proto::Header& hh) {
    std::vector<Frame> payload;
    AppendViewFrames(params.data(), 400, 0, 4, nullptr, &payload);
    WireMessage msg;
    EXPECT_FALSE(ParseMessage(EncodeMessage("p", hh, std::move(payload)), &msg));
    Refusal v = ValidateAtClient(msg, scope);
    return v ? v->reason : RejectReason::kNone;
  };
  EXPECT_EQ(check(h), RejectReason::kNone);
  proto::Header bad = h;
  bad.set_begin(0);
  bad.set_end(100);
  EXPECT_EQ(check(bad), RejectReason::kBadRange);
  bad = h;
  bad.set_sender_id(0);
  EXPECT_EQ(check(bad), RejectReason::kUnknownSender);
  bad = h;
  bad.set_job_id(1);
  EXPECT_EQ(check(bad), RejectReason::kWrongJob);
  bad = h;
  bad.set_dtype(proto::BFLOAT16);  // a bf16 answer, but 400 bytes for 100 elements
  EXPECT_EQ(check(bad), RejectReason::kBadPayload);
  bad = h;
  bad.set_dtype(proto::DTYPE_UNSPECIFIED);
  EXPECT_EQ(check(bad), RejectReason::kBadPayload);
}

// fp32 parameters are checksummed in the copy that puts them in place: the validator leaves the
// CRC to it when asked, and the copy tells a damaged payload (any byte of any frame) from a whole one.
TEST(Validation, ClientChecksumsParamsInTheCopy) {
  ClientScope scope{42, 2, 200};
  std::vector<float> params(100);
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.25f * static_cast<float>(i) - 7.0f;
  proto::Header h = MessageHeader(proto::PARAMS, 42, proto::SERVER, 1, 1);
  h.set_dtype(proto::FLOAT32);
  h.set_begin(100);
  h.set_end(200);
  for (const int flip_at : {-1, 0, 131, 399}) {  // -1: undamaged; else the byte flipped
    std::vector<Frame> payload;
    AppendViewFrames(params.data(), 400, 64, 4, nullptr, &payload);
    RawMessage raw = EncodeMessage("p", h, std::move(payload));
    if (flip_at >= 0) {  // frames of 64 bytes after the header frame
      std::string bytes(raw.frames[1 + flip_at / 64].bytes());
      bytes[flip_at % 64] ^= 0x10;
      raw.frames[1 + flip_at / 64] = Frame::Own(bytes);
    }
    WireMessage msg;
    ASSERT_FALSE(ParseMessage(std::move(raw), &msg));
    const Refusal full = ValidateAtClient(msg, scope);
    EXPECT_EQ(full ? full->reason : RejectReason::kNone,
              flip_at < 0 ? RejectReason::kNone : RejectReason::kBadChecksum);
    EXPECT_FALSE(ValidateAtClient(msg, scope, /*defer_checksum=*/true)) << flip_at;
    std::vector<float> out(100, 0.0f);
    EXPECT_EQ(CopyCheckedFloats(msg, out.data()), flip_at < 0) << flip_at;
    if (flip_at < 0) {
      EXPECT_EQ(out, params);
    }
  }
}

// Split over threads, the copy checks the same: a payload of 400 kB in 64 kB frames, damaged or not.
TEST(Validation, ClientCopyChecksTheSameOnSeveralThreads) {
  constexpr size_t kN = 100000;
  std::vector<float> params(kN);
  for (size_t i = 0; i < kN; ++i) params[i] = 0.5f * static_cast<float>(i % 977) - 3.0f;
  proto::Header h = MessageHeader(proto::PARAMS, 42, proto::SERVER, 1, 1);
  h.set_dtype(proto::FLOAT32);
  h.set_begin(0);
  h.set_end(kN);
  for (const int flip_at : {-1, 3, 250001, 4 * static_cast<int>(kN) - 1}) {
    std::vector<Frame> payload;
    AppendViewFrames(params.data(), 4 * kN, 1 << 16, 4, nullptr, &payload);
    RawMessage raw = EncodeMessage("p", h, std::move(payload));
    if (flip_at >= 0) {
      std::string bytes(raw.frames[1 + flip_at / (1 << 16)].bytes());
      bytes[flip_at % (1 << 16)] ^= 0x01;
      raw.frames[1 + flip_at / (1 << 16)] = Frame::Own(bytes);
    }
    WireMessage msg;
    ASSERT_FALSE(ParseMessage(std::move(raw), &msg));
    for (int threads : {1, 3}) {
      std::vector<float> out(kN, 0.0f);
      EXPECT_EQ(CopyCheckedFloats(msg, out.data(), threads), flip_at < 0) << flip_at << ", " << threads;
      if (flip_at < 0) {
        EXPECT_EQ(out, params) << threads;
      }
    }
  }
}

// A PULL names the element type it wants back: FLOAT32, BFLOAT16, or unspecified (FLOAT32).
TEST(Validation, PullMayAskForFloat32OrBfloat16Only) {
  PushFixture f;
  proto::Header h = f.Header();
  h.set_type(proto::PULL);
  h.clear_payload_bytes();
  h.clear_payload_crc32c();
  for (proto::DType dtype : {proto::DTYPE_UNSPECIFIED, proto::FLOAT32, proto::BFLOAT16}) {
    h.set_dtype(dtype);
    EXPECT_EQ(f.Reason(EncodeMessage("p", h, {})), RejectReason::kNone) << proto::DType_Name(dtype);
  }
  h.set_dtype(static_cast<proto::DType>(9));
  EXPECT_EQ(f.Reason(EncodeMessage("p", h, {})), RejectReason::kBadPayload);
}

TEST(RejectCounters, CountsByReason) {
  RejectCounters c;
  EXPECT_EQ(c.ToString(), "none");
  c.Count(RejectReason::kWrongJob);
  c.Count(RejectReason::kWrongJob);
  c.Count(RejectReason::kBadChecksum);
  EXPECT_EQ(c.Get(RejectReason::kWrongJob), 2u);
  EXPECT_EQ(c.Total(), 3u);
  EXPECT_EQ(c.ToString(), "wrong job=2 bad checksum=1");
}

}  // namespace
}  // namespace psformer
