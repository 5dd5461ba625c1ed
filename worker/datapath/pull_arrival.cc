#include "worker/datapath/pull_arrival.h"

#include <algorithm>
#include <utility>

namespace psformer {

void PullArrival::Reset() {
  MutexLock lock(&mutex_);
  landed_.clear();
  outcome_.reset();
  lent_.clear();
}

void PullArrival::Landed(uint64_t begin, uint64_t end, std::shared_ptr<const LentParams> lent) {
  if (begin >= end) return;
  {
    MutexLock lock(&mutex_);
    if (lent) lent_[lent->model] = std::move(lent);
    // Insert in order, then merge with the neighbours it touches or overlaps.
    auto at = std::lower_bound(landed_.begin(), landed_.end(), std::make_pair(begin, end));
    at = landed_.insert(at, {begin, end});
    if (at != landed_.begin() && std::prev(at)->second >= at->first) {
      --at;
      at->second = std::max(at->second, std::next(at)->second);
      landed_.erase(std::next(at));
    }
    while (std::next(at) != landed_.end() && std::next(at)->first <= at->second) {
      at->second = std::max(at->second, std::next(at)->second);
      landed_.erase(std::next(at));
    }
  }
  cv_.notify_all();
}

void PullArrival::Finish(Outcome outcome) {
  {
    MutexLock lock(&mutex_);
    outcome_ = std::move(outcome);
  }
  cv_.notify_all();
}

bool PullArrival::Covered(uint64_t begin, uint64_t end) const {
  if (begin >= end) return true;
  // The landed range holding `begin`, if any, must reach `end` (merged ranges leave no seams).
  auto after = std::upper_bound(landed_.begin(), landed_.end(), std::make_pair(begin, UINT64_MAX));
  if (after == landed_.begin()) return false;
  const auto& holding = *std::prev(after);
  return holding.first <= begin && holding.second >= end;
}

Status PullArrival::Await(uint64_t begin, uint64_t end) {
  MutexLock lock(&mutex_);
  while (!outcome_.has_value() && !Covered(begin, end)) lock.Wait(&cv_);
  if (outcome_ && !outcome_->status.ok()) return outcome_->status;
  return Status::Ok();
}

PullArrival::Outcome PullArrival::AwaitAll() {
  MutexLock lock(&mutex_);
  while (!outcome_.has_value()) lock.Wait(&cv_);
  return *outcome_;
}

std::vector<std::shared_ptr<const LentParams>> PullArrival::LentIn(uint64_t begin, uint64_t end) const {
  std::vector<std::shared_ptr<const LentParams>> out;
  MutexLock lock(&mutex_);
  // Pieces are disjoint: the one beginning at or before `begin` may reach into the range.
  auto it = lent_.upper_bound(begin);
  if (it != lent_.begin()) --it;
  for (; it != lent_.end() && it->first < end; ++it) {
    if (it->second->model + it->second->size() > begin) out.push_back(it->second);
  }
  return out;
}

}  // namespace psformer
