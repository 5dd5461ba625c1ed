#include "pserver/server/gradient_aggregator.h"

#include <algorithm>
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

GradientAggregator::GradientAggregator(int workers, size_t n, PartsTaken parts)
    : n_(n),
      parts_(parts),
      waiting_(parts == PartsTaken::kRows ? 0 : workers),
      rows_(parts == PartsTaken::kDenseAndRows || parts == PartsTaken::kRows ? workers : 0) {}

bool GradientAggregator::Takes(proto::PushPart part) const {
  switch (parts_) {
    case PartsTaken::kWhole:
      return part == proto::WHOLE;
    case PartsTaken::kDenseAndRows:
      return part == proto::DENSE || part == proto::ROWS;
    case PartsTaken::kDense:
      return part == proto::DENSE;
    case PartsTaken::kRows:
      return part == proto::ROWS;
  }
  return false;
}

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
  PSF_CHECK(Takes(part) && w >= 0 && w < static_cast<int>(std::max(waiting_.size(), rows_.size())) && !Has(w, part));
  PSF_CHECK(push.header.end() - push.header.begin() == n_);
  if (part == proto::ROWS) {
    HeldRows held{std::move(push), {}};
    PSF_CHECK(!ParseRows(held.message, &held.rows));  // the validator's check, passed
    rows_[w] = std::move(held);
  } else {
    waiting_[w] = std::move(push);
  }
  if (++held_ < static_cast<int>(waiting_.size() + rows_.size())) return;
  complete_ = true;
  // In worker order, as the gradient is summed; every part of a worker's push carries the same.
  const auto add = [this](const proto::Header& h) {
    tokens_ += h.target_tokens();
    loss_ += h.loss_sum();
  };
  if (!waiting_.empty()) {
    for (const auto& p : waiting_) add(p->header);
  } else {
    for (const auto& r : rows_) add(r->message.header);
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
