// PieceTable: the pieces of the flat parameter vector that travel, are summed and are updated on
// their own (docs/architecture.md, "Overlap"). Workers and servers build the same table from the
// job's config and layout, so a piece is named by its element range alone.
//
// The vector is cut at every shard boundary (a piece lies in one shard), at every given cut (the
// layer starts: backward finishes a layer at a time) and so that no piece exceeds max_elements
// (a large layer, the embedding above all, is split into near-equal parts that pipeline).
// Without cuts and limit there is one piece per shard: the whole-shard protocol.
#ifndef PSFORMER_PSERVER_WIRE_PIECE_TABLE_H_
#define PSFORMER_PSERVER_WIRE_PIECE_TABLE_H_

#include <cstdint>
#include <vector>

#include "common/param_layout.h"
#include "common/proto/config.pb.h"

namespace psformer {

struct Piece {
  uint64_t begin = 0;
  uint64_t end = 0;
  int shard = 0;
  uint64_t size() const { return end - begin; }
};

class PieceTable {
 public:
  // `total` elements over `shards` shards (ShardOf), cut also at `cuts` (any order; 0 and values
  // >= total are ignored) and into parts of at most max_elements (0 = no limit).
  // REQUIRES: 1 <= shards <= total.
  PieceTable(uint64_t total, int shards, std::vector<uint64_t> cuts = {}, uint64_t max_elements = 0);

  const std::vector<Piece>& pieces() const { return pieces_; }
  uint64_t total() const { return total_; }
  int shards() const { return shards_; }
  ShardRange shard_range(int shard) const { return ShardOf(total_, shards_, shard); }
  // The pieces of `shard`: indices [first, last) into pieces().
  int FirstOf(int shard) const { return first_[shard]; }
  int EndOf(int shard) const { return first_[shard + 1]; }
  // The piece that begins at `begin`, or -1.
  int IndexAt(uint64_t begin) const;
  // Whether [begin, end) is a run of whole consecutive pieces of one shard (what a PUSH or PULL
  // may name); then *first and *last (exclusive) are their indices.
  bool IsRun(uint64_t begin, uint64_t end, int* first = nullptr, int* last = nullptr) const;

 private:
  uint64_t total_;
  int shards_;
  std::vector<Piece> pieces_;
  std::vector<int> first_;  // (shards + 1)
};

// The job's table: with cluster.overlap under BSP, cut at `layer_starts` (ParamLayout::LayerStarts)
// and at cluster.piece_elements; otherwise one piece per shard.
PieceTable JobPieceTable(const proto::JobConfig& config, uint64_t total, const std::vector<uint64_t>& layer_starts);
// The elements of a piece when cluster.piece_elements is 0.
constexpr uint64_t kDefaultPieceElements = uint64_t{1} << 22;

}  // namespace psformer

#endif  // PSFORMER_PSERVER_WIRE_PIECE_TABLE_H_
