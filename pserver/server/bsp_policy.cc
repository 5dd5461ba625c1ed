#include "pserver/server/bsp_policy.h"

#include <algorithm>

#include "common/logging.h"

namespace psformer {

BspPolicy::BspPolicy(int workers, ShardRange range, const std::vector<uint64_t>& piece_starts,
                     const std::vector<uint8_t>& split_pieces)
    : range_(range), starts_(piece_starts), heard_(workers, 0), tokens_(workers, 0), loss_(workers, 0) {
  if (starts_.empty()) starts_.push_back(0);
  starts_.push_back(range.size());
  for (size_t p = 0; p + 1 < starts_.size(); ++p) {
    const bool split = p < split_pieces.size() && split_pieces[p] != 0;
    pieces_.emplace_back(workers, starts_[p + 1] - starts_[p], split ? PartsTaken::kDenseAndRows : PartsTaken::kWhole);
  }
  Restart(0);
}

void BspPolicy::Restart(int64_t step) {
  step_ = step + 1;
  for (GradientAggregator& piece : pieces_) piece.Begin(step_);
  done_count_ = 0;
  named_.assign(pieces_.size(), std::nullopt);
  outside_count_ = 0;
  std::fill(heard_.begin(), heard_.end(), 0);
}

int BspPolicy::PieceAt(uint64_t begin) const {
  const auto it = std::lower_bound(starts_.begin(), starts_.end() - 1, begin);
  return it != starts_.end() - 1 && *it == begin ? static_cast<int>(it - starts_.begin()) : -1;
}

// Every piece of a worker's step carries the same batch totals; a piece that disagrees would
// normalise its part of the update differently from the rest.
std::string BspPolicy::Inconsistent(int worker, const WireMessage& msg) const {
  const proto::Header& push = msg.header;
  if (push.step() == step_ && push.part() == proto::ROWS) {
    const int p = PieceAt(push.begin() - range_.begin);
    RowsGradient rows;
    if (p >= 0 && !ParseRows(msg, &rows)) {  // validated: parses
      const bool outside_named = !pieces_[p].RowsInsideNamed(worker, rows.runs);
      if (outside_named || (named_[p] && !RunsWithin(rows.runs, *named_[p]))) {
        return "ROWS push of step " + std::to_string(push.step()) + " from worker " + std::to_string(worker) +
               " holds elements outside the rows " +
               (outside_named ? "its DENSE part named" : "named before it came (they are updated already)");
      }
    }
  }
  if (heard_[worker] == 0 || push.step() != step_) return "";
  if (push.target_tokens() == tokens_[worker] && push.loss_sum() == loss_[worker]) return "";
  return "push of step " + std::to_string(push.step()) + " from worker " + std::to_string(worker) + " carries " +
         std::to_string(push.target_tokens()) + " target tokens and loss " + std::to_string(push.loss_sum()) +
         ", its earlier pieces of the step " + std::to_string(tokens_[worker]) + " and " +
         std::to_string(loss_[worker]);
}

std::optional<AppliedUpdate> BspPolicy::Accept(int worker, WireMessage push, ShardOptimizer* optimizer) {
  const int p = PieceAt(push.header.begin() - range_.begin);
  PSF_CHECK(p >= 0 && push.header.end() - range_.begin == starts_[p + 1] &&
            !pieces_[p].Has(worker, push.header.part()));
  if (heard_[worker]++ == 0) {
    tokens_[worker] = push.header.target_tokens();
    loss_[worker] = push.header.loss_sum();
  }
  GradientAggregator& piece = pieces_[p];
  piece.Add(worker, std::move(push));
  const int64_t step = step_;
  AppliedUpdate update;
  update.step = step;
  if (!piece.Complete()) {
    std::optional<std::vector<ElementRun>> mask = named_[p] ? std::nullopt : piece.EarlyMask();
    if (!mask) return std::nullopt;
    // Every element outside the named rows has its whole gradient: its update need not wait.
    optimizer->ApplyPieceRuns(step, p, piece.dense_gradient(), piece.total_tokens(), *mask, /*inside=*/false);
    named_[p] = std::move(mask);
    ++outside_count_;
    update.partial = true;
    update.outside_pass = true;
    update.loss_sum = piece.loss_sum();
    update.target_tokens = piece.total_tokens();
    return update;
  }
  if (piece.total_tokens() == 0 && done_count_ == 0) {
    PSF_LOG(Warning) << "step " << step << " has no target tokens; its gradient is applied unnormalised";
  }
  if (named_[p]) {
    optimizer->ApplyPieceRuns(step, p, piece.gradient(), piece.total_tokens(), *named_[p], /*inside=*/true);
  } else {
    optimizer->ApplyPiece(step, p, piece.gradient(), piece.total_tokens());  // normalises on the way
  }
  piece.Consumed();
  update.whole_step = ++done_count_ == static_cast<int>(pieces_.size());
  update.partial = !update.whole_step;
  update.loss_sum = piece.loss_sum();
  update.target_tokens = piece.total_tokens();
  if (update.whole_step) {
    optimizer->FinishStep();
    Restart(step);
  }
  return update;
}

bool BspPolicy::PullReady(const proto::Header& pull, const ShardProgress& p) const {
  if (p.applied_step >= pull.step()) return true;
  // A pull without a range (none reaches here past validation) stands for the whole shard.
  const bool ranged = pull.end() > pull.begin();
  const int first = ranged ? PieceAt(pull.begin() - range_.begin) : 0;
  const uint64_t end = ranged ? pull.end() - range_.begin : range_.size();
  if (pull.step() != step_ || first < 0) return false;
  for (int q = first; q < static_cast<int>(pieces_.size()) && starts_[q] < end; ++q) {
    // A piece is applied as soon as it is complete; its DENSE part may be before.
    if (!pieces_[q].Complete() && !(pull.part() == proto::DENSE && named_[q])) return false;
  }
  return true;
}

}  // namespace psformer
