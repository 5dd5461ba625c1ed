#include "pserver/client/pull_landing.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/bfloat16.h"
#include "common/crc32c.h"
#include "common/parallel_for.h"
#include "common/trace.h"
#include "pserver/wire/gradient_rows.h"

namespace psformer {

PullLanding::PullLanding(int copy_threads) : copy_threads_(copy_threads), thread_([this] { Loop(); }) {}

PullLanding::~PullLanding() {
  {
    MutexLock lock(&mutex_);
    closing_ = true;
    jobs_.clear();  // their frames go back to their senders now
  }
  work_cv_.notify_all();
  thread_.join();
}

void PullLanding::Land(Job job) {
  ++handed_;
  {
    MutexLock lock(&mutex_);
    jobs_.push_back(std::move(job));
  }
  work_cv_.notify_one();
}

std::vector<PullLanding::Landed> PullLanding::TakeLanded() {
  std::vector<Landed> out;
  {
    MutexLock lock(&mutex_);
    out.swap(landed_);
  }
  taken_ += out.size();
  return out;
}

void PullLanding::WaitForLanded(std::chrono::microseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  MutexLock lock(&mutex_);
  while (landed_.empty()) {
    if (lock.WaitUntil(&landed_cv_, deadline) == std::cv_status::timeout) return;
  }
}

void PullLanding::Quiesce() {
  MutexLock lock(&mutex_);
  while (landed_count_ != handed_) lock.Wait(&landed_cv_);
}

void PullLanding::Loop() {
  pthread_setname_np(pthread_self(), "psf-land");
  while (true) {
    Job job;
    {
      MutexLock lock(&mutex_);
      while (jobs_.empty() && !closing_) lock.Wait(&work_cv_);
      if (jobs_.empty()) return;  // closing
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    const Landed landed = LandNow(job, copy_threads_);
    job = Job();  // lets go of the frames before the outcome is seen (a slot back to its sender)
    {
      MutexLock lock(&mutex_);
      landed_.push_back(landed);
      ++landed_count_;
      if (wakeup_ != nullptr) wakeup_->Notify();
    }
    landed_cv_.notify_all();
  }
}

namespace {

constexpr size_t kGrain = 1 << 15;  // elements per thread at least (copies, checksums)

// A part of a split piece: checked (CRC, then its table against its values), then each of its
// runs written into place; with piece_crc, the whole piece's CRC as it travels after it.
bool LandPart(const PullLanding::Job& job, int copy_threads, uint32_t* piece_crc) {
  const proto::Header& h = job.msg.header;
  if (PayloadCrc32c(job.msg.payload, copy_threads) != h.payload_crc32c()) return false;
  RunTable table;
  if (ParseRunTable(job.msg, &table) || table.value_count() != TabledValues(h, table.named)) return false;
  const uint64_t n = h.end() - h.begin();
  const std::vector<ElementRun> runs = h.part() == proto::ROWS ? table.runs : ComplementRuns(table.runs, n);
  const bool bf16 = h.dtype() == proto::BFLOAT16;
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  // The values lie end to end in the payload (RunStarts). Split over the copy threads by value,
  // as a whole piece's copy is (elementwise: the same bytes land).
  const std::vector<uint64_t> starts = RunStarts(runs);
  ParallelFor(copy_threads, starts.back(), kGrain, [&](int, size_t begin, size_t end) {
    ForEachRunPart(starts, begin, end, [&](size_t r, uint64_t first, uint64_t last) {
      ForEachPayloadSpan(table.values.payload, elem, starts[r] + first, starts[r] + last,
                         [&](const uint8_t* bytes, uint64_t value, uint64_t count) {
                           const uint64_t at = runs[r].offset + (value - starts[r]);
                           if (!bf16) {
                             std::memcpy(job.params + at, bytes, count * elem);
                           } else if (job.params_bf16 != nullptr) {
                             std::memcpy(job.params_bf16 + at, bytes, count * elem);
                           } else {
                             Bf16ToFloats(bytes, count, job.params + at);
                           }
                         });
    });
  });
  if (!job.piece_crc) return true;
  PartCrcs crc(ParallelPieces(copy_threads, n, kGrain));
  ParallelFor(copy_threads, n, kGrain, [&](int part, size_t b, size_t e) {
    if (!bf16) {
      crc.crc[part] = Crc32c(0, job.params + b, (e - b) * elem);
    } else if (job.params_bf16 != nullptr) {
      crc.crc[part] = Crc32c(0, job.params_bf16 + b, (e - b) * elem);
    } else {
      // Widened exactly: rounding again gives the bytes that travelled.
      uint16_t block[4096];
      for (size_t i = b; i < e; i += 4096) {
        const size_t k = std::min<size_t>(4096, e - i);
        FloatsToBf16(job.params + i, k, block);
        crc.crc[part] = Crc32c(crc.crc[part], block, k * elem);
      }
    }
    crc.bytes[part] = (e - b) * elem;
  });
  *piece_crc = crc.Combined();
  return true;
}

}  // namespace

PullLanding::Landed PullLanding::LandNow(const Job& job, int copy_threads) {
  const proto::Header& h = job.msg.header;
  const TraceSpan traced("params_into_place", job.step, static_cast<int64_t>(job.model));
  Landed out{job.sequence, false, h.payload_crc32c(), h.loss_sum(), h.target_tokens()};
  if (h.part() != proto::WHOLE) {
    out.intact = LandPart(job, copy_threads, &out.crc32c);
    out.piece_crc = out.intact && job.piece_crc;
    return out;
  }
  // The dtype is the pull's (the client checked it): FLOAT32 or BFLOAT16.
  if (job.lend && (h.dtype() == proto::FLOAT32 ? job.params != nullptr : job.params_bf16 != nullptr)) {
    // Checked where it lies; a validated message's frames hold whole elements.
    out.intact = PayloadCrc32c(job.msg.payload, copy_threads) == h.payload_crc32c();
    if (out.intact)
      out.lent = std::make_shared<const LentParams>(LentParams{job.model, DTypeBytes(h.dtype()), job.msg.payload});
    return out;
  }
  if (h.dtype() == proto::FLOAT32) {
    out.intact = CopyCheckedFloats(job.msg, job.params, copy_threads);
  } else if (job.params_bf16 != nullptr) {
    out.intact = CopyCheckedBytes(job.msg, job.params_bf16, copy_threads);  // as it came: its caller widens it
  } else if ((out.intact = PayloadCrc32c(job.msg.payload, copy_threads) == h.payload_crc32c())) {
    CopyPayloadAsFloats(job.msg, job.params, copy_threads);  // bf16 widened, split over threads
  }
  return out;
}

}  // namespace psformer
