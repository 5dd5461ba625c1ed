#include "pserver/server/gradient_aggregator.h"

#include <cstring>

#include "common/logging.h"

namespace psformer {

void SumInWorkerOrder(const PieceGradient& g, size_t begin, size_t end, float* out) {
  PSF_CHECK(g.sum != nullptr || !g.parts.empty());
  if (g.sum != nullptr) std::memcpy(out, g.sum + begin, (end - begin) * sizeof(float));
  for (size_t w = 0; w < g.parts.size(); ++w) {
    AddPayloadRange(*g.parts[w], begin, end, out, /*assign=*/w == 0 && g.sum == nullptr);
  }
}

GradientAggregator::GradientAggregator(int workers, size_t n) : n_(n), waiting_(workers) {}

void GradientAggregator::Begin(int64_t step) {
  step_ = step;
  for (auto& w : waiting_) w.reset();
  held_ = 0;
  complete_ = false;
  tokens_ = 0;
  loss_ = 0;
}

void GradientAggregator::Add(int w, WireMessage push) {
  PSF_CHECK(w >= 0 && w < static_cast<int>(waiting_.size()) && !waiting_[w] && !complete_);
  PSF_CHECK(push.header.end() - push.header.begin() == n_);
  waiting_[w] = std::move(push);
  if (++held_ < static_cast<int>(waiting_.size())) return;
  complete_ = true;
  for (const auto& p : waiting_) {  // in worker order, as the gradient is summed
    tokens_ += p->header.target_tokens();
    loss_ += p->header.loss_sum();
  }
}

PieceGradient GradientAggregator::gradient() const {
  PSF_CHECK(complete_ && held_ > 0);
  PieceGradient g;
  for (const auto& p : waiting_) g.parts.push_back(&*p);
  return g;
}

void GradientAggregator::Consumed() {
  PSF_CHECK(complete_);
  for (auto& w : waiting_) w.reset();
  held_ = 0;
}

}  // namespace psformer
