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
      named_(waiting_.size()),
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
  for (auto& n : named_) n.reset();
  held_ = 0;
  waiting_held_ = 0;
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
    if (part == proto::DENSE && push.header.named()) {
      // The table is kept apart: the sum reads the frames after it as a whole piece's.
      RunTable table;
      PSF_CHECK(!ParseRunTable(push, &table));  // the validator's check, passed
      named_[w] = MergedRuns(std::move(table.runs));
      push.payload = std::move(table.values.payload);
    }
    waiting_[w] = std::move(push);
    ++waiting_held_;
  }
  // In worker order, as the gradient is summed; every part of a worker's push carries the same.
  const auto totals = [this](const auto& messages, const auto& header_of) {
    tokens_ = 0;
    loss_ = 0;
    for (const auto& m : messages) {
      tokens_ += header_of(*m).target_tokens();
      loss_ += header_of(*m).loss_sum();
    }
  };
  if (!waiting_.empty() && waiting_held_ == static_cast<int>(waiting_.size())) {
    totals(waiting_, [](const WireMessage& m) -> const proto::Header& { return m.header; });
  }
  if (++held_ < static_cast<int>(waiting_.size() + rows_.size())) return;
  complete_ = true;
  if (waiting_.empty()) totals(rows_, [](const HeldRows& r) -> const proto::Header& { return r.message.header; });
}

std::optional<std::vector<ElementRun>> GradientAggregator::NamedUnion() const {
  if (waiting_.empty() || waiting_held_ < static_cast<int>(waiting_.size())) return std::nullopt;
  std::vector<ElementRun> all;
  for (const auto& n : named_) {
    if (!n) return std::nullopt;
    all.insert(all.end(), n->begin(), n->end());
  }
  return MergedRuns(std::move(all));
}

std::optional<std::vector<ElementRun>> GradientAggregator::EarlyMask() const {
  if (complete_ || parts_ != PartsTaken::kDenseAndRows) return std::nullopt;
  std::optional<std::vector<ElementRun>> named = NamedUnion();
  if (!named) return std::nullopt;
  std::vector<ElementRun> all = std::move(*named);
  for (const auto& r : rows_) {
    if (r) all.insert(all.end(), r->rows.runs.begin(), r->rows.runs.end());
  }
  return MergedRuns(std::move(all));
}

bool GradientAggregator::RowsInsideNamed(int w, std::span<const ElementRun> rows) const {
  if (w < 0 || static_cast<size_t>(w) >= named_.size() || !named_[w]) return true;
  return RunsWithin(rows, *named_[w]);
}

PieceGradient GradientAggregator::dense_gradient() const {
  PSF_CHECK(waiting_held_ == static_cast<int>(waiting_.size()) && !waiting_.empty());
  PieceGradient g;
  for (const auto& p : waiting_) g.parts.push_back(&*p);
  return g;
}

PieceGradient GradientAggregator::gradient() const {
  PSF_CHECK(complete_ && held_ > 0);
  PieceGradient g;
  for (const auto& p : waiting_) g.parts.push_back(&*p);
  for (const auto& r : rows_) g.rows.push_back(&r->rows);
  return g;
}

void GradientAggregator::Drop(int w) {
  PSF_CHECK(w >= 0 && static_cast<size_t>(w) < waiting_.size() && waiting_[w].has_value());
  waiting_[w].reset();
  named_[w].reset();
  --waiting_held_;
  --held_;
  complete_ = false;
}

void GradientAggregator::Consumed() {
  PSF_CHECK(complete_);
  for (auto& w : waiting_) w.reset();
  for (auto& r : rows_) r.reset();
  held_ = 0;
  waiting_held_ = 0;
}

}  // namespace psformer
