#include "pserver/server/shard_optimizer.h"

#include <algorithm>
#include <cstring>

#include "common/bfloat16.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/lr_schedule.h"
#include "common/parallel_for.h"
#include "common/transport/van.h"
#include "pserver/wire/gradient_rows.h"

namespace psformer {
namespace {

// Elements per block of the fused pass: a block's five fp32 streams and its bf16 copy stay in
// the L2 cache between the update and the checksums that read it back.
constexpr size_t kBlock = kSumBlock;

}  // namespace

ShardOptimizer::ShardOptimizer(const proto::JobConfig& config, uint64_t begin, uint64_t end, int threads,
                               std::vector<uint64_t> piece_starts, PayloadAllocator allocate)
    : config_(config),
      allocate_(allocate ? std::move(allocate) : PayloadAllocator(&Van::HeapPayload)),
      threads_(threads),
      bf16_pulls_(config.cluster().param_dtype() == proto::ClusterConfig::BF16),
      piece_starts_(std::move(piece_starts)),
      params_(end - begin),
      m_(end - begin),
      v_(end - begin) {
  hyper_.beta1 = config.optimizer().beta1();
  hyper_.beta2 = config.optimizer().beta2();
  hyper_.epsilon = config.optimizer().epsilon();
  if (piece_starts_.empty()) piece_starts_.push_back(0);
  PSF_CHECK(piece_starts_.front() == 0 && std::is_sorted(piece_starts_.begin(), piece_starts_.end()) &&
            piece_starts_.back() < std::max<uint64_t>(1, end - begin));
}

void ShardOptimizer::Initialize(const std::function<void(uint64_t, uint64_t, float*)>& init) {
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(v_.begin(), v_.end(), 0.0f);
  updates_ = 0;
  pieces_applied_ = 0;
  pieces_half_applied_ = 0;
  current_.reset();
  next_.reset();
  previous_.reset();
  init(0, params_.size(), params_.data());
}

void ShardOptimizer::Restore(ShardCheckpoint checkpoint) {
  PSF_CHECK(checkpoint.params.size() == params_.size());
  params_ = std::move(checkpoint.params);
  m_ = std::move(checkpoint.m);
  v_ = std::move(checkpoint.v);
  updates_ = checkpoint.updates;
  pieces_applied_ = 0;
  pieces_half_applied_ = 0;
  current_.reset();
  next_.reset();
  previous_.reset();
}

std::shared_ptr<ShardOptimizer::Snapshot> ShardOptimizer::FreshSnapshot() {
  std::shared_ptr<Snapshot> fresh;
  if (previous_ && previous_.use_count() == 1) fresh = std::move(previous_);
  previous_.reset();
  if (!fresh) {
    fresh = std::make_shared<Snapshot>();
    fresh->values = Allocate<float>();
  }
  fresh->has_rounded = bf16_pulls_;
  if (bf16_pulls_ && !fresh->rounded.memory) fresh->rounded = Allocate<uint16_t>();
  fresh->crc.assign(piece_count(), 0);
  fresh->crc16.assign(piece_count(), 0);
  fresh->named.assign(piece_count(), {});
  fresh->crc_stale.assign(piece_count(), 0);
  fresh->parts.assign(piece_count(), {});
  return fresh;
}

void ShardOptimizer::Apply(int64_t step, const float* grad, uint64_t target_tokens) {
  for (int p = 0; p < piece_count(); ++p) {
    ApplyPiece(step, p, PieceGradient{grad + piece_starts_[p], {}, {}}, target_tokens);
  }
  FinishStep();
}

void ShardOptimizer::ApplyPiece(int64_t step, int piece, const PieceGradient& grad, uint64_t target_tokens) {
  const AdamStepConstants k = AdamConstants(hyper_, static_cast<int64_t>(updates_ + 1), LearningRate(config_, step));
  if (!next_) next_ = FreshSnapshot();
  Snapshot& snap = *next_;
  const size_t offset = piece_starts_[piece];
  const size_t n = PieceEnd(piece) - offset;
  const int parts = ParallelPieces(threads_, n, kBlock);
  PartCrcs exact_crc(parts), rounded_crc(parts);
  const float tokens = static_cast<float>(target_tokens);
  const float* out = snap.values.data() + offset;
  const uint16_t* out16 = bf16_pulls_ ? snap.rounded.data() + offset : nullptr;
  ParallelFor(threads_, n, kBlock, [&](int part, size_t begin, size_t end) {
    std::vector<float> block(grad.parts.empty() ? 0 : kBlock);
    for (size_t b = begin; b < end; b += kBlock) {
      const size_t e = std::min(end, b + kBlock);
      UpdateRange(k, grad, tokens, offset, b, e, block.data());
      exact_crc.crc[part] = Crc32c(exact_crc.crc[part], out + b, (e - b) * sizeof(float));
      if (out16 != nullptr) {
        rounded_crc.crc[part] = Crc32c(rounded_crc.crc[part], out16 + b, (e - b) * sizeof(uint16_t));
      }
    }
    exact_crc.bytes[part] = (end - begin) * sizeof(float);
    rounded_crc.bytes[part] = (end - begin) * sizeof(uint16_t);
  });
  snap.crc[piece] = exact_crc.Combined();
  snap.crc16[piece] = rounded_crc.Combined();
  ++pieces_applied_;
}

void ShardOptimizer::UpdateRange(const AdamStepConstants& k, const PieceGradient& grad, float tokens, size_t offset,
                                 size_t b, size_t e, float* block) {
  const float* g = grad.sum != nullptr ? grad.sum + b : nullptr;
  if (!grad.parts.empty()) {
    // The workers' shares added in worker order into a block that stays in cache.
    SumInWorkerOrder(grad, b, e, block);
    g = block;
  }
  const size_t at = offset + b;
  float* out = next_->values.data() + at;
  AdamFused(k, e - b, g, tokens, params_.data() + at, m_.data() + at, v_.data() + at, out);
  if (bf16_pulls_) FloatsToBf16(out, e - b, next_->rounded.data() + at);
}

void ShardOptimizer::ApplyPieceRuns(int64_t step, int piece, const PieceGradient& grad, uint64_t target_tokens,
                                    const std::vector<ElementRun>& named, bool inside) {
  const AdamStepConstants k = AdamConstants(hyper_, static_cast<int64_t>(updates_ + 1), LearningRate(config_, step));
  if (!next_) next_ = FreshSnapshot();
  const size_t offset = piece_starts_[piece];
  const size_t n = PieceEnd(piece) - offset;
  const std::vector<ElementRun> runs = inside ? named : ComplementRuns(named, n);
  // The pass runs over the runs' elements laid end to end (RunStarts).
  const std::vector<uint64_t> starts = RunStarts(runs);
  const float tokens = static_cast<float>(target_tokens);
  ParallelFor(threads_, starts.back(), kBlock, [&](int, size_t begin, size_t end) {
    std::vector<float> block(grad.parts.empty() ? 0 : kBlock);
    ForEachRunPart(starts, begin, end, [&](size_t r, uint64_t first, uint64_t last) {
      for (uint64_t b = first; b < last; b += kBlock) {
        const size_t from = runs[r].offset + b;
        UpdateRange(k, grad, tokens, offset, from, from + (std::min(last, b + kBlock) - b), block.data());
      }
    });
  });
  next_->named[piece] = named;
  next_->crc_stale[piece] = 1;
  pieces_half_applied_ += inside ? -1 : 1;
  if (inside) ++pieces_applied_;
}

void ShardOptimizer::MakeCrcs(Snapshot* s, int piece) {
  const size_t offset = piece_starts_[piece], n = PieceEnd(piece) - offset;
  PartCrcs exact(ParallelPieces(threads_, n, kBlock)), rounded(ParallelPieces(threads_, n, kBlock));
  ParallelFor(threads_, n, kBlock, [&](int part, size_t begin, size_t end) {
    exact.crc[part] = Crc32c(0, s->values.data() + offset + begin, (end - begin) * sizeof(float));
    exact.bytes[part] = (end - begin) * sizeof(float);
    if (s->has_rounded) {
      rounded.crc[part] = Crc32c(0, s->rounded.data() + offset + begin, (end - begin) * sizeof(uint16_t));
      rounded.bytes[part] = (end - begin) * sizeof(uint16_t);
    }
  });
  s->crc[piece] = exact.Combined();
  if (s->has_rounded) s->crc16[piece] = rounded.Combined();
  s->crc_stale[piece] = 0;
}

std::shared_ptr<ShardOptimizer::Snapshot> ShardOptimizer::SnapshotOf(Version version) {
  return version == Version::kInProgress ? next_ : version == Version::kPrevious ? previous_ : Current();
}

SnapshotSlice ShardOptimizer::PartSlice(Version version, bool bf16, int piece, proto::PushPart part, uint32_t* runs) {
  PSF_CHECK(part == proto::DENSE || part == proto::ROWS);
  std::shared_ptr<Snapshot> snap = SnapshotOf(version);
  PSF_CHECK(snap != nullptr);
  const size_t offset = piece_starts_[piece], n = PieceEnd(piece) - offset;
  const std::vector<ElementRun>& named = snap->named[piece];
  *runs = static_cast<uint32_t>(named.size());
  if (named.empty()) {
    if (part == proto::DENSE) return Slice(version, bf16, offset, offset + n);
    return SnapshotSlice{};
  }
  std::shared_ptr<const SnapshotSlice>& made = snap->parts[piece][(part - 1) * 2 + (bf16 ? 1 : 0)];
  if (made) return *made;
  // Made once per update and part: the table, then the part's values gathered after it, copied
  // and checksummed in one pass split over the shard's threads (a split piece's pull is served
  // from this copy, not lent from the snapshot in place as a whole piece is).
  const std::vector<ElementRun> gaps = part == proto::ROWS ? named : ComplementRuns(named, n);
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  uint64_t count = 0;
  for (const ElementRun& r : gaps) count += r.length;
  const size_t table = named.size() * kRunBytes;
  const size_t total = table + count * elem;
  std::shared_ptr<void> bytes = Van::HeapPayload(total);  // not zeroed: every byte is written below
  char* out = static_cast<char*>(bytes.get());
  std::vector<CrcSpan> spans{{named.data(), out, table}};
  out += table;
  const float* values = snap->values.data() + offset;
  for (const ElementRun& r : gaps) {
    const size_t length = r.length * elem;
    if (!bf16) {
      spans.push_back({values + r.offset, out, length});
    } else if (snap->has_rounded) {
      spans.push_back({snap->rounded.data() + offset + r.offset, out, length});
    } else {  // rounded here (a bf16 pull of an update that made no bf16), then only read
      FloatsToBf16(values + r.offset, r.length, reinterpret_cast<uint16_t*>(out));
      spans.push_back({out, nullptr, length});
    }
    out += length;
  }
  const uint32_t crc = Crc32cSpans(spans, threads_);
  made = std::make_shared<const SnapshotSlice>(SnapshotSlice{bytes, bytes.get(), total, crc});
  return *made;
}

void ShardOptimizer::FinishStep() {
  PSF_CHECK(next_ && pieces_applied_ == piece_count());
  ++updates_;
  pieces_applied_ = 0;
  pieces_half_applied_ = 0;
  previous_ = std::move(current_);
  current_ = std::move(next_);
}

const std::shared_ptr<ShardOptimizer::Snapshot>& ShardOptimizer::Current() {
  if (current_) return current_;
  // Only before the first update after Initialize or Restore: updates make the others.
  std::shared_ptr<Snapshot> fresh = FreshSnapshot();
  fresh->has_rounded = false;
  for (int p = 0; p < piece_count(); ++p) {
    const size_t offset = piece_starts_[p], n = PieceEnd(p) - offset;
    PartCrcs crc(ParallelPieces(threads_, n, kBlock));
    ParallelFor(threads_, n, kBlock, [&](int part, size_t begin, size_t end) {
      std::memcpy(fresh->values.data() + offset + begin, params_.data() + offset + begin,
                  (end - begin) * sizeof(float));
      crc.crc[part] = Crc32c(0, fresh->values.data() + offset + begin, (end - begin) * sizeof(float));
      crc.bytes[part] = (end - begin) * sizeof(float);
    });
    fresh->crc[p] = crc.Combined();
  }
  current_ = std::move(fresh);
  return current_;
}

void ShardOptimizer::Round(Snapshot* s) {
  if (!s->rounded.memory) s->rounded = Allocate<uint16_t>();
  for (int p = 0; p < piece_count(); ++p) {
    const size_t offset = piece_starts_[p], n = PieceEnd(p) - offset;
    PartCrcs crc(ParallelPieces(threads_, n, kBlock));
    ParallelFor(threads_, n, kBlock, [&](int part, size_t begin, size_t end) {
      FloatsToBf16(s->values.data() + offset + begin, end - begin, s->rounded.data() + offset + begin);
      crc.crc[part] = Crc32c(0, s->rounded.data() + offset + begin, (end - begin) * sizeof(uint16_t));
      crc.bytes[part] = (end - begin) * sizeof(uint16_t);
    });
    s->crc16[p] = crc.Combined();
  }
  s->has_rounded = true;
}

SnapshotSlice ShardOptimizer::Slice(Version version, bool bf16, uint64_t begin, uint64_t end) {
  PSF_CHECK(begin < end && end <= params_.size());
  const bool in_progress = version == Version::kInProgress;
  std::shared_ptr<Snapshot> snap = SnapshotOf(version);
  PSF_CHECK(snap != nullptr);
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  const auto first = std::lower_bound(piece_starts_.begin(), piece_starts_.end(), begin);
  const auto last = std::lower_bound(piece_starts_.begin(), piece_starts_.end(), end);
  const bool whole_pieces = first != piece_starts_.end() && *first == begin &&
                            (end == params_.size() || (last != piece_starts_.end() && *last == end));
  if (bf16 && !snap->has_rounded) {
    if (!in_progress && whole_pieces) {
      Round(snap.get());  // once per update: every later bf16 pull of it shares the rounding
    } else {
      // A piece of an update in progress in a job that pulls fp32: round just this range.
      auto copy = std::make_shared<std::vector<uint16_t>>(end - begin);
      FloatsToBf16(snap->values.data() + begin, end - begin, copy->data());
      const uint32_t crc = Crc32c(0, copy->data(), copy->size() * elem);
      return SnapshotSlice{copy, copy->data(), copy->size() * elem, crc};
    }
  }
  const void* data = bf16 ? static_cast<const void*>(snap->rounded.data() + begin)
                          : static_cast<const void*>(snap->values.data() + begin);
  const size_t bytes = (end - begin) * elem;
  uint32_t crc = 0;
  if (whole_pieces) {
    const std::vector<uint32_t>& crcs = bf16 ? snap->crc16 : snap->crc;
    for (auto p = first - piece_starts_.begin(); p < last - piece_starts_.begin(); ++p) {
      if (snap->crc_stale[p] != 0) MakeCrcs(snap.get(), static_cast<int>(p));
      crc = Crc32cCombine(crc, crcs[p], (PieceEnd(static_cast<int>(p)) - piece_starts_[p]) * elem);
    }
  } else {
    crc = Crc32c(0, data, bytes);
  }
  return SnapshotSlice{std::shared_ptr<const void>(snap, data), data, bytes, crc};
}

}  // namespace psformer
