#include "pserver/server/gradient_aggregator.h"

#include "common/logging.h"

namespace psformer {

GradientAggregator::GradientAggregator(int workers, size_t n, int threads)
    : received_(workers, false), waiting_(workers), sum_(n), threads_(threads) {}

void GradientAggregator::Begin(int64_t step) {
  step_ = step;
  std::fill(received_.begin(), received_.end(), false);
  for (auto& w : waiting_) w.reset();
  next_ = 0;
  tokens_ = 0;
  loss_ = 0;
}

void GradientAggregator::Add(int w, WireMessage push) {
  PSF_CHECK(w >= 0 && w < static_cast<int>(received_.size()) && !received_[w]);
  PSF_CHECK(push.header.end() - push.header.begin() == sum_.size());
  received_[w] = true;
  waiting_[w] = std::move(push);
  Drain();
}

void GradientAggregator::Drain() {
  while (next_ < static_cast<int>(waiting_.size()) && waiting_[next_].has_value()) {
    const WireMessage& push = *waiting_[next_];
    if (next_ == 0) {
      CopyPayloadAsFloats(push, sum_.data(), threads_);
    } else {
      AddPayloadAsFloats(push, sum_.data(), threads_);
    }
    tokens_ += push.header.target_tokens();
    loss_ += push.header.loss_sum();
    waiting_[next_].reset();  // releases the received frames.
    ++next_;
  }
}

}  // namespace psformer
