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
  AddRowsInOrder(g.rows, begin, end, out);
}

GradientAggregator::GradientAggregator(int workers, size_t n, bool split)
    : n_(n), split_(split), waiting_(workers), rows_(split ? workers : 0) {}

void GradientAggregator::Begin(int64_t step) {
  step_ = step;
  for (auto& w : waiting_) w.reset();
  for (auto& r : rows_) r.reset();
  held_ = 0;
  complete_ = false;
  tokens_ = 0;
  loss_ = 0;
}

void GradientAggregator::Add(int w, WireMessage push) {
  const proto::PushPart part = push.header.part();
  PSF_CHECK(w >= 0 && w < static_cast<int>(waiting_.size()) && !Has(w, part));
  PSF_CHECK(push.header.end() - push.header.begin() == n_ && (part == proto::WHOLE) != split_);
  if (part == proto::ROWS) {
    HeldRows held{std::move(push), {}};
    PSF_CHECK(!ParseRows(held.message, &held.rows));  // the validator's check, passed
    rows_[w] = std::move(held);
  } else {
    waiting_[w] = std::move(push);
  }
  if (++held_ < static_cast<int>(waiting_.size() + rows_.size())) return;
  complete_ = true;
  for (const auto& p : waiting_) {  // in worker order, as the gradient is summed (a ROWS part carries the same)
    tokens_ += p->header.target_tokens();
    loss_ += p->header.loss_sum();
  }
}

PieceGradient GradientAggregator::gradient() const {
  PSF_CHECK(complete_ && held_ > 0);
  PieceGradient g;
  for (const auto& p : waiting_) g.parts.push_back(&*p);
  for (const auto& r : rows_) g.rows.push_back(&r->rows);
  return g;
}

void GradientAggregator::Consumed() {
  PSF_CHECK(complete_);
  for (auto& w : waiting_) w.reset();
  for (auto& r : rows_) r.reset();
  held_ = 0;
}

}  // namespace psformer
