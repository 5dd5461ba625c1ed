// PullLanding (pserver/client/pull_landing.h): pulled pieces copied into place and checked on a
// thread of their own, their outcomes taken in the order given.
#include "pserver/client/pull_landing.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/bfloat16.h"
#include "common/crc32c.h"
#include "common/transport/wakeup.h"
#include "pserver/wire/gradient_rows.h"

namespace psformer {
namespace {

// A PARAMS reply of `values` (fp32, or rounded to bf16), in frames of `frame` elements, with
// its CRC-32C set (or set wrong, for a damaged one).
WireMessage Reply(const std::vector<float>& values, bool bf16, size_t frame, bool damaged = false) {
  WireMessage msg;
  msg.header.set_type(proto::PARAMS);
  msg.header.set_dtype(bf16 ? proto::BFLOAT16 : proto::FLOAT32);
  msg.header.set_step(7);
  msg.header.set_begin(0);
  msg.header.set_end(values.size());
  msg.header.set_loss_sum(2.5);
  msg.header.set_target_tokens(40);
  std::vector<uint8_t> bytes;
  for (float v : values) {
    if (bf16) {
      const uint16_t h = FloatToBf16(v);
      bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + 2);
    } else {
      bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 4);
    }
  }
  const size_t step = frame * (bf16 ? 2 : 4);
  for (size_t at = 0; at < bytes.size(); at += step) {
    const size_t n = std::min(step, bytes.size() - at);
    msg.payload.push_back(Frame::Copy(bytes.data() + at, n));
  }
  msg.header.set_payload_bytes(bytes.size());
  msg.header.set_payload_crc32c(Crc32c(0, bytes.data(), bytes.size()) ^ (damaged ? 1u : 0u));
  return msg;
}

std::vector<float> Values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + 0.25f * static_cast<float>(i);
  return v;
}

// Takes every outcome, waiting for them as the client does.
std::vector<PullLanding::Landed> TakeAll(PullLanding& landing) {
  std::vector<PullLanding::Landed> all;
  for (int i = 0; i < 10000 && landing.busy(); ++i) {
    landing.WaitForLanded(std::chrono::microseconds(1000));
    for (const auto& l : landing.TakeLanded()) all.push_back(l);
  }
  return all;
}

TEST(PullLanding, PiecesLandInPlaceCheckedAndInTheOrderGiven) {
  PullLanding landing(3);
  std::vector<float> params(3000, -1.0f);
  const std::vector<float> a = Values(1000, 1.0f), b = Values(2000, 5000.0f);
  landing.Land({11, 7, 0, Reply(a, false, 333), params.data(), nullptr});
  landing.Land({12, 7, 1000, Reply(b, false, 1 << 20), params.data() + 1000, nullptr});
  EXPECT_TRUE(landing.busy());
  const std::vector<PullLanding::Landed> landed = TakeAll(landing);
  ASSERT_EQ(landed.size(), 2u);
  EXPECT_FALSE(landing.busy());
  EXPECT_EQ(landed[0].sequence, 11u);
  EXPECT_EQ(landed[1].sequence, 12u);
  for (const auto& l : landed) {
    EXPECT_TRUE(l.intact);
    EXPECT_EQ(l.loss_sum, 2.5);
    EXPECT_EQ(l.target_tokens, 40u);
  }
  EXPECT_EQ(std::memcmp(params.data(), a.data(), a.size() * 4), 0);
  EXPECT_EQ(std::memcmp(params.data() + 1000, b.data(), b.size() * 4), 0);
}

// Whether `fd` becomes readable within `ms`.
bool ReadableWithin(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

// Each outcome notifies the client thread's wakeup, which waits in its Van's poll, not in
// WaitForLanded: a landed piece ends that wait at once.
TEST(PullLanding, EachOutcomeNotifiesTheClientsWakeup) {
  Wakeup wakeup;
  ASSERT_GE(wakeup.fd(), 0);
  PullLanding landing(2);
  landing.NotifyOnLanded(&wakeup);
  std::vector<float> params(2000, -1.0f);
  for (uint64_t sequence : {21u, 22u}) {
    wakeup.Drain();
    EXPECT_FALSE(ReadableWithin(wakeup.fd(), 0));
    landing.Land({sequence, 7, 0, Reply(Values(2000, 3.0f), false, 500), params.data(), nullptr});
    ASSERT_TRUE(ReadableWithin(wakeup.fd(), 30000)) << "piece " << sequence << " landed without a word";
    const std::vector<PullLanding::Landed> landed = landing.TakeLanded();
    ASSERT_EQ(landed.size(), 1u);
    EXPECT_EQ(landed[0].sequence, sequence);
    EXPECT_TRUE(landed[0].intact);
  }
}

TEST(PullLanding, ADamagedPieceIsToldAndBf16LandsWidenedOrAsItCame) {
  PullLanding landing(2);
  std::vector<float> params(600, 0.0f);
  std::vector<uint16_t> as_bf16(600, 0);
  std::vector<float> v(600);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0f + 0.5f * static_cast<float>(i % 64);  // exact in bf16
  landing.Land({1, 7, 0, Reply(v, false, 100, /*damaged=*/true), params.data(), nullptr});
  landing.Land({2, 7, 0, Reply(v, true, 128), params.data(), nullptr});
  landing.Land({3, 7, 0, Reply(v, true, 128), nullptr, as_bf16.data()});
  landing.Quiesce();  // every job landed: outcomes waiting to be taken
  const std::vector<PullLanding::Landed> landed = landing.TakeLanded();
  ASSERT_EQ(landed.size(), 3u);
  EXPECT_FALSE(landed[0].intact);
  EXPECT_TRUE(landed[1].intact);
  EXPECT_TRUE(landed[2].intact);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(params[i], v[i]) << i;  // the widened bf16, written over the damaged fp32 copy
    ASSERT_EQ(as_bf16[i], FloatToBf16(v[i])) << i;
  }
}

// A piece left where it came (Job::lend) is checked and not written: its outcome hands on the
// frames it came in, which hold exactly the values sent, span by span over any range; damaged, it
// is told and hands nothing on. A bf16 piece for fp32 parameters is widened into them as before.
TEST(PullLanding, ALentPieceIsCheckedWhereItLiesAndNotWritten) {
  PullLanding landing(2);
  std::vector<float> params(3000, -1.0f);
  std::vector<uint16_t> as_bf16(3000, 7);
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0f + 0.5f * static_cast<float>(i % 64);  // exact in bf16
  landing.Land({1, 7, 1000, Reply(v, false, 333), params.data() + 1000, nullptr, false, true});
  landing.Land({2, 7, 1000, Reply(v, false, 333, /*damaged=*/true), params.data() + 1000, nullptr, false, true});
  landing.Land({3, 7, 2000, Reply(v, true, 128), nullptr, as_bf16.data() + 2000, false, true});
  landing.Land({4, 7, 0, Reply(v, true, 128), params.data(), nullptr, false, true});
  const std::vector<PullLanding::Landed> landed = TakeAll(landing);
  ASSERT_EQ(landed.size(), 4u);
  EXPECT_TRUE(landed[0].intact);
  EXPECT_FALSE(landed[1].intact);
  EXPECT_EQ(landed[1].lent, nullptr) << "a damaged piece is handed on";
  EXPECT_TRUE(landed[2].intact);
  EXPECT_TRUE(landed[3].intact);
  EXPECT_EQ(landed[3].lent, nullptr) << "bf16 widened into fp32 cannot be left as it came";
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(params[i], v[i]) << i;  // widened
    ASSERT_EQ(params[1000 + i], -1.0f) << "a lent piece was written at " << i;
    ASSERT_EQ(as_bf16[2000 + i], 7) << "a lent piece was written at " << i;
  }
  // The lent pieces' values, read back through ForEachSpan over ranges that begin and end
  // inside frames, and over ranges beyond the piece.
  const std::shared_ptr<const LentParams> fp32 = landed[0].lent, bf16 = landed[2].lent;
  ASSERT_NE(fp32, nullptr);
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(fp32->model, 1000u);
  EXPECT_EQ(fp32->element_bytes, 4u);
  EXPECT_EQ(fp32->size(), v.size());
  EXPECT_EQ(bf16->element_bytes, 2u);
  for (const auto& [b, e] :
       std::vector<std::pair<uint64_t, uint64_t>>{{0, 5000}, {1100, 1700}, {1332, 1334}, {1999, 2001}}) {
    uint64_t next = std::max<uint64_t>(b, 1000);
    fp32->ForEachSpan(b, e, [&](uint64_t at, const uint8_t* bytes, uint64_t count) {
      ASSERT_EQ(at, next);
      for (uint64_t k = 0; k < count; ++k) {
        float x;
        std::memcpy(&x, bytes + 4 * k, 4);
        ASSERT_EQ(x, v[at - 1000 + k]) << at + k;
      }
      next = at + count;
    });
    EXPECT_EQ(next, std::min<uint64_t>(e, 2000)) << "[" << b << ", " << e << ")";
  }
  uint64_t seen = 0;
  bf16->ForEachSpan(2000, 3000, [&](uint64_t at, const uint8_t* bytes, uint64_t count) {
    for (uint64_t k = 0; k < count; ++k) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * k, 2);
      ASSERT_EQ(h, FloatToBf16(v[at - 2000 + k])) << at + k;
    }
    seen += count;
  });
  EXPECT_EQ(seen, v.size());
  int none = 0;
  fp32->ForEachSpan(0, 1000, [&](uint64_t, const uint8_t*, uint64_t) { ++none; });
  fp32->ForEachSpan(2000, 2500, [&](uint64_t, const uint8_t*, uint64_t) { ++none; });
  EXPECT_EQ(none, 0) << "a span outside the piece";
}

TEST(PullLanding, EndingWritesNothingOnceItReturns) {
  // Jobs still queued at the end are dropped, the one being landed finishes first: after the
  // destructor, nothing writes into the destinations any more (each is intact or untouched).
  const std::vector<float> v = Values(1 << 20, -7.0f);
  std::vector<std::vector<float>> params(8, std::vector<float>(v.size(), 0.0f));
  {
    PullLanding landing(1);
    for (size_t i = 0; i < params.size(); ++i) {
      landing.Land({i, 7, 0, Reply(v, false, 1 << 16), params[i].data(), nullptr});
    }
  }
  for (const std::vector<float>& p : params) {
    const bool landed = std::memcmp(p.data(), v.data(), v.size() * 4) == 0;
    const bool untouched = std::all_of(p.begin(), p.end(), [](float x) { return x == 0.0f; });
    EXPECT_TRUE(landed || untouched);
  }
}

// One part of a split piece's answer (the named runs' values, or the rest's), its run table
// first, in frames of `frame` values.
WireMessage PartReply(const std::vector<float>& piece, const std::vector<ElementRun>& named, proto::PushPart which,
                      bool bf16, size_t frame) {
  std::vector<float> values;
  const std::vector<ElementRun> runs = which == proto::ROWS ? named : ComplementRuns(named, piece.size());
  for (const ElementRun& r : runs)
    values.insert(values.end(), piece.begin() + r.offset, piece.begin() + r.offset + r.length);
  WireMessage msg = Reply(values, bf16, frame);
  msg.header.set_end(piece.size());
  msg.header.set_part(which);
  msg.header.set_runs(static_cast<uint32_t>(named.size()));
  msg.payload.insert(msg.payload.begin(), Frame::Copy(named.data(), named.size() * kRunBytes));
  std::vector<uint8_t> all;
  for (const Frame& f : msg.payload) all.insert(all.end(), f.data(), f.data() + f.size());
  msg.header.set_payload_bytes(all.size());
  msg.header.set_payload_crc32c(Crc32c(0, all.data(), all.size()));
  return msg;
}

// The two parts of a split piece (PARAMS with a run table: DENSE, all but the named runs; ROWS,
// those runs) land run by run wherever they come from; the part that lands second makes the
// whole piece's CRC as it travelled: fp32, bf16 kept as it came, or bf16 widened into fp32.
TEST(PullLanding, TheTwoPartsOfASplitPieceLandAndTheSecondMakesThePiecesCrc) {
  const std::vector<float> piece = Values(40, -3.0f);
  const std::vector<ElementRun> named = {{2, 3}, {10, 8}, {39, 1}};
  const auto part = [&](proto::PushPart which, bool bf16) { return PartReply(piece, named, which, bf16, 4); };
  for (const bool bf16 : {false, true}) {
    for (const bool keep_bf16 : {false, true}) {
      if (keep_bf16 && !bf16) continue;
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + (keep_bf16 ? ", kept as it came" : ""));
      std::vector<float> params(piece.size(), 99.0f);
      std::vector<uint16_t> params16(piece.size(), 0);
      std::vector<uint16_t> rounded(piece.size());
      FloatsToBf16(piece.data(), piece.size(), rounded.data());
      PullLanding::Job first{1,
                             7,
                             0,
                             part(proto::ROWS, bf16),
                             keep_bf16 ? nullptr : params.data(),
                             keep_bf16 ? params16.data() : nullptr,
                             false};
      PullLanding::Job second{2,
                              7,
                              0,
                              part(proto::DENSE, bf16),
                              keep_bf16 ? nullptr : params.data(),
                              keep_bf16 ? params16.data() : nullptr,
                              true};
      const PullLanding::Landed a = PullLanding::LandNow(first, 2);
      const PullLanding::Landed b = PullLanding::LandNow(second, 2);
      EXPECT_TRUE(a.intact && b.intact);
      EXPECT_FALSE(a.piece_crc);
      ASSERT_TRUE(b.piece_crc);
      if (keep_bf16) {
        EXPECT_EQ(params16, rounded);
        EXPECT_EQ(b.crc32c, Crc32c(0, rounded.data(), rounded.size() * 2));
      } else if (bf16) {
        std::vector<float> widened(piece.size());
        for (size_t i = 0; i < piece.size(); ++i) widened[i] = Bf16ToFloat(rounded[i]);
        EXPECT_EQ(params, widened);
        EXPECT_EQ(b.crc32c, Crc32c(0, rounded.data(), rounded.size() * 2));
      } else {
        EXPECT_EQ(params, piece);
        EXPECT_EQ(b.crc32c, Crc32c(0, piece.data(), piece.size() * 4));
      }
      // A table that does not describe the values is damage, as a wrong CRC is.
      WireMessage bad = part(proto::DENSE, bf16);
      bad.header.set_part(proto::ROWS);
      EXPECT_FALSE(PullLanding::LandNow({3, 7, 0, std::move(bad), params.data(), nullptr, false}, 1).intact);
    }
  }
}

// A piece large enough to be split over the copy threads, with runs and frames that end anywhere:
// every split lands the same bytes, each where the table puts it.
TEST(PullLanding, ASplitPieceLandsTheSameOverAnyNumberOfCopyThreads) {
  const std::vector<float> piece = Values(300007, 1.0f);
  std::vector<ElementRun> named = {{0, 5}};
  for (uint32_t at = 1000; at + 700 < piece.size(); at += 2999) named.push_back({at, 512 + at % 97});
  named.push_back({static_cast<uint32_t>(piece.size() - 3), 3});
  for (const int threads : {1, 2, 3, 7}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<float> params(piece.size(), -7.0f);
    for (const proto::PushPart which : {proto::ROWS, proto::DENSE}) {
      const PullLanding::Landed landed = PullLanding::LandNow(
          {1, 7, 0, PartReply(piece, named, which, false, 1001), params.data(), nullptr, false}, threads);
      EXPECT_TRUE(landed.intact);
      if (which == proto::ROWS) {  // only the named runs so far; the rest as it was
        for (const ElementRun& r : named) EXPECT_EQ(params[r.offset + r.length - 1], piece[r.offset + r.length - 1]);
        EXPECT_EQ(params[6], -7.0f);
      }
    }
    EXPECT_EQ(params, piece);
  }
}

}  // namespace
}  // namespace psformer
