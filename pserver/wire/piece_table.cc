#include "pserver/wire/piece_table.h"

#include <algorithm>

#include "common/logging.h"

namespace psformer {

PieceTable::PieceTable(uint64_t total, int shards, std::vector<uint64_t> cuts, uint64_t max_elements)
    : total_(total), shards_(shards) {
  PSF_CHECK(shards >= 1 && static_cast<uint64_t>(shards) <= total);
  for (int k = 1; k < shards; ++k) cuts.push_back(ShardOf(total, shards, k).begin);
  cuts.push_back(0);
  cuts.push_back(total);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  while (cuts.back() > total) cuts.pop_back();
  int shard = 0;
  first_.push_back(0);
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const uint64_t begin = cuts[c], end = cuts[c + 1];
    while (begin >= shard_range(shard).end) {
      ++shard;
      first_.push_back(static_cast<int>(pieces_.size()));
    }
    const uint64_t parts = max_elements == 0 ? 1 : (end - begin + max_elements - 1) / max_elements;
    for (uint64_t p = 0; p < parts; ++p) {
      pieces_.push_back(Piece{begin + (end - begin) * p / parts, begin + (end - begin) * (p + 1) / parts, shard});
    }
  }
  while (static_cast<int>(first_.size()) <= shards) first_.push_back(static_cast<int>(pieces_.size()));
}

int PieceTable::IndexAt(uint64_t begin) const {
  const auto it = std::lower_bound(pieces_.begin(), pieces_.end(), begin,
                                   [](const Piece& p, uint64_t b) { return p.begin < b; });
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

PieceTable JobPieceTable(const proto::JobConfig& config, uint64_t total, const std::vector<uint64_t>& layer_starts) {
  const auto& c = config.cluster();
  if (!c.overlap() || c.consistency() != proto::ClusterConfig::BSP) return PieceTable(total, c.servers());
  const uint64_t max = c.piece_elements() > 0 ? static_cast<uint64_t>(c.piece_elements()) : kDefaultPieceElements;
  return PieceTable(total, c.servers(), layer_starts, max);
}

}  // namespace psformer
