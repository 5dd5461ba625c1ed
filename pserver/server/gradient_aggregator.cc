#include "pserver/server/gradient_aggregator.h"

#include "common/logging.h"

namespace psformer {

GradientAggregator::GradientAggregator(int workers, size_t n, int threads)
    : received_(workers, false), waiting_(workers), n_(n), threads_(threads) {}

void GradientAggregator::Begin(int64_t step) {
  step_ = step;
  std::fill(received_.begin(), received_.end(), false);
  for (auto& w : waiting_) w.reset();
  next_ = 0;
  tail_held_ = false;
  tokens_ = 0;
  loss_ = 0;
}

void GradientAggregator::Add(int w, WireMessage push) {
  PSF_CHECK(w >= 0 && w < static_cast<int>(received_.size()) && !received_[w]);
  PSF_CHECK(push.header.end() - push.header.begin() == n_);
  received_[w] = true;
  waiting_[w] = std::move(push);
  Drain();
}

bool GradientAggregator::Complete() const { return tail_held_ || next_ == static_cast<int>(received_.size()); }

PieceGradient GradientAggregator::gradient() const {
  PSF_CHECK(Complete());
  PieceGradient g;
  if (next_ > 0) g.sum = sum_.data();
  if (tail_held_) g.tail = &*waiting_[next_];
  return g;
}

void GradientAggregator::Consumed() {
  PSF_CHECK(Complete());
  if (tail_held_) {
    waiting_[next_].reset();
    ++next_;
    tail_held_ = false;
  }
}

void GradientAggregator::Drain() {
  const int workers = static_cast<int>(waiting_.size());
  while (!tail_held_ && next_ < workers && waiting_[next_].has_value()) {
    const WireMessage& push = *waiting_[next_];
    tokens_ += push.header.target_tokens();
    loss_ += push.header.loss_sum();
    // The last worker's fp32 push stays in its frames: the update adds it (see the header).
    if (next_ == workers - 1 && push.header.dtype() == proto::FLOAT32) {
      tail_held_ = true;
      return;
    }
    if (sum_.empty()) sum_.resize(n_);
    if (next_ == 0) {
      CopyPayloadAsFloats(push, sum_.data(), threads_);
    } else {
      AddPayloadAsFloats(push, sum_.data(), threads_);
    }
    waiting_[next_].reset();  // releases the received frames.
    ++next_;
  }
}

}  // namespace psformer
