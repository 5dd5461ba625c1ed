#include "pserver/client/pull_landing.h"

#include <pthread.h>

#include <utility>

#include "common/trace.h"

namespace psformer {

PullLanding::PullLanding(int copy_threads) : copy_threads_(copy_threads), thread_([this] { Loop(); }) {}

PullLanding::~PullLanding() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    jobs_.clear();  // their frames go back to their senders now
  }
  work_cv_.notify_all();
  thread_.join();
}

void PullLanding::Land(Job job) {
  ++handed_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  work_cv_.notify_one();
}

std::vector<PullLanding::Landed> PullLanding::TakeLanded() {
  std::vector<Landed> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(landed_);
  }
  taken_ += out.size();
  return out;
}

void PullLanding::WaitForLanded(std::chrono::microseconds limit) {
  std::unique_lock<std::mutex> lock(mutex_);
  landed_cv_.wait_for(lock, limit, [&] { return !landed_.empty(); });
}

void PullLanding::Quiesce() {
  std::unique_lock<std::mutex> lock(mutex_);
  landed_cv_.wait(lock, [&] { return landed_count_ == handed_; });
}

void PullLanding::Loop() {
  pthread_setname_np(pthread_self(), "psf-land");
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return !jobs_.empty() || closing_; });
      if (jobs_.empty()) return;  // closing
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    const Landed landed = LandNow(job, copy_threads_);
    job = Job();  // lets go of the frames before the outcome is seen (a slot back to its sender)
    {
      std::lock_guard<std::mutex> lock(mutex_);
      landed_.push_back(landed);
      ++landed_count_;
    }
    landed_cv_.notify_all();
  }
}

PullLanding::Landed PullLanding::LandNow(const Job& job, int copy_threads) {
  const proto::Header& h = job.msg.header;
  const TraceSpan traced("params_into_place", job.step, static_cast<int64_t>(job.model));
  Landed out{job.sequence, false, h.payload_crc32c(), h.loss_sum(), h.target_tokens()};
  // The dtype is the pull's (the client checked it): FLOAT32 or BFLOAT16.
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
