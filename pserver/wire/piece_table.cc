#include "pserver/wire/piece_table.h"

#include <algorithm>

#include "common/logging.h"

namespace psformer {

namespace {

// Cuts sorted and unique, with 0 and total, none beyond total.
std::vector<uint64_t> Bounds(std::vector<uint64_t> cuts, uint64_t total) {
  cuts.push_back(0);
  cuts.push_back(total);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  while (cuts.back() > total) cuts.pop_back();
  return cuts;
}

// parts[l][k]: the elements of run l (between bounds l and l + 1) that shard k holds: near-equal
// shares, then the largest run corrected so that shard k holds ShardOf(total, shards, k) in all.
// Empty when no run is large enough to take the correction (tiny vectors): then no spreading.
std::vector<std::vector<uint64_t>> SpreadShares(const std::vector<uint64_t>& bounds, int shards, uint64_t total) {
  const size_t runs = bounds.size() - 1;
  std::vector<std::vector<uint64_t>> parts(runs, std::vector<uint64_t>(shards));
  std::vector<int64_t> deficit(shards);
  for (int k = 0; k < shards; ++k) deficit[k] = static_cast<int64_t>(ShardOf(total, shards, k).size());
  size_t largest = 0;
  for (size_t l = 0; l < runs; ++l) {
    const uint64_t n = bounds[l + 1] - bounds[l];
    if (n > bounds[largest + 1] - bounds[largest]) largest = l;
    for (int k = 0; k < shards; ++k) {
      parts[l][k] = n * (k + 1) / shards - n * k / shards;
      deficit[k] -= static_cast<int64_t>(parts[l][k]);
    }
  }
  for (int k = 0; k < shards; ++k) {
    const int64_t corrected = static_cast<int64_t>(parts[largest][k]) + deficit[k];
    if (corrected < 0) return {};
    parts[largest][k] = static_cast<uint64_t>(corrected);
  }
  return parts;
}

}  // namespace

PieceTable::PieceTable(uint64_t total, int shards, std::vector<uint64_t> cuts, uint64_t max_elements, bool spread)
    : total_(total), shards_(shards) {
  PSF_CHECK(shards >= 1 && static_cast<uint64_t>(shards) <= total);
  const std::vector<uint64_t> layer_bounds = Bounds(cuts, total);
  // Without cuts there is one run, and its shares are the contiguous shards.
  const bool runs = layer_bounds.size() > 2;
  const auto shares =
      spread && shards > 1 && runs ? SpreadShares(layer_bounds, shards, total) : std::vector<std::vector<uint64_t>>();
  spread_ = !shares.empty();
  if (spread_) {
    // Shard k's wire range: part k of every run, in run order.
    for (int k = 0; k < shards; ++k) {
      first_.push_back(static_cast<int>(pieces_.size()));
      uint64_t wire = ShardOf(total, shards, k).begin;
      for (size_t l = 0; l + 1 < layer_bounds.size(); ++l) {
        uint64_t model = layer_bounds[l];
        for (int j = 0; j < k; ++j) model += shares[l][j];
        CutIntoPieces(wire, model, shares[l][k], k, max_elements);
        wire += shares[l][k];
      }
    }
  } else {
    for (int k = 1; k < shards; ++k) cuts.push_back(ShardOf(total, shards, k).begin);
    const std::vector<uint64_t> bounds = Bounds(cuts, total);
    int shard = 0;
    first_.push_back(0);
    for (size_t c = 0; c + 1 < bounds.size(); ++c) {
      while (bounds[c] >= ShardOf(total, shards, shard).end) {
        ++shard;
        first_.push_back(static_cast<int>(pieces_.size()));
      }
      CutIntoPieces(bounds[c], bounds[c], bounds[c + 1] - bounds[c], shard, max_elements);
    }
  }
  while (static_cast<int>(first_.size()) <= shards) first_.push_back(static_cast<int>(pieces_.size()));
  model_order_.resize(pieces_.size());
  for (size_t p = 0; p < pieces_.size(); ++p) model_order_[p] = static_cast<int>(p);
  std::sort(model_order_.begin(), model_order_.end(),
            [this](int a, int b) { return pieces_[a].model_begin < pieces_[b].model_begin; });
}

void PieceTable::CutIntoPieces(uint64_t wire_begin, uint64_t model_begin, uint64_t size, int shard,
                               uint64_t max_elements) {
  if (size == 0) return;
  const uint64_t parts = max_elements == 0 ? 1 : (size + max_elements - 1) / max_elements;
  for (uint64_t p = 0; p < parts; ++p) {
    const uint64_t b = size * p / parts, e = size * (p + 1) / parts;
    pieces_.push_back(Piece{wire_begin + b, wire_begin + e, shard, model_begin + b});
  }
}

std::vector<float> PieceTable::ToModelOrder(const std::vector<float>& wire) const {
  PSF_CHECK(wire.size() == total_);
  if (!spread_) return wire;
  std::vector<float> model(total_);
  for (const Piece& p : pieces_) std::copy(wire.begin() + p.begin, wire.begin() + p.end, model.begin() + p.model_begin);
  return model;
}

int PieceTable::IndexAt(uint64_t begin) const {
  const auto it =
      std::lower_bound(pieces_.begin(), pieces_.end(), begin, [](const Piece& p, uint64_t b) { return p.begin < b; });
  return it != pieces_.end() && it->begin == begin ? static_cast<int>(it - pieces_.begin()) : -1;
}

bool PieceTable::IsRun(uint64_t begin, uint64_t end, int* first, int* last) const {
  const int a = IndexAt(begin);
  if (a < 0 || end <= begin) return false;
  int b = a;
  while (b < static_cast<int>(pieces_.size()) && pieces_[b].end < end && pieces_[b].shard == pieces_[a].shard) ++b;
  if (b == static_cast<int>(pieces_.size()) || pieces_[b].end != end || pieces_[b].shard != pieces_[a].shard) {
    return false;
  }
  if (first != nullptr) *first = a;
  if (last != nullptr) *last = b + 1;
  return true;
}

uint64_t JobPieceElements(const proto::JobConfig& config) {
  const int64_t max = config.cluster().piece_elements();
  return max > 0 ? static_cast<uint64_t>(max) : kDefaultPieceElements;
}

PieceTable JobPieceTable(const proto::JobConfig& config, uint64_t total, const std::vector<uint64_t>& layer_starts) {
  const auto& c = config.cluster();
  if (!c.overlap() || c.consistency() != proto::ClusterConfig::BSP) return PieceTable(total, c.servers());
  PieceTable table(total, c.servers(), layer_starts, JobPieceElements(config), c.spread_layers());
  if (c.split_embedding()) {
    // The embedding is the first layer: it ends where the first layer after it begins.
    uint64_t embedding_end = 0;
    for (uint64_t start : layer_starts) {
      if (start > 0 && (embedding_end == 0 || start < embedding_end)) embedding_end = start;
    }
    if (embedding_end > 0) table.SplitBelow(embedding_end);
  }
  return table;
}

void PieceTable::SplitBelow(uint64_t model_end) {
  for (Piece& p : pieces_) {
    if (p.model_begin < model_end) p.split = has_split_ = true;
  }
}

}  // namespace psformer
