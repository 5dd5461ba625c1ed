// PieceTable: the pieces of the flat parameter vector that travel, are summed and are updated on
// their own (docs/architecture.md, "Overlap"). Workers and servers build the same table from the
// job's config and layout, so a piece is named by its element range alone.
//
// The vector is cut at every shard boundary (a piece lies in one shard), at every given cut (the
// layer starts: backward finishes a layer at a time) and so that no piece exceeds max_elements
// (a large layer, the embedding above all, is split into near-equal parts that pipeline).
// Without cuts and limit there is one piece per shard: the whole-shard protocol.
//
// Two orders. A piece's model range [model_begin, model_begin + size) is where its elements lie
// in the flat vector workers compute with (ParamLayout). Its wire range [begin, end) is where
// they lie in the servers' order, in which shard k always holds ShardOf(total, shards, k): the
// wire range is what messages, shards and checkpoints name. Contiguous tables have one order.
// A spread table (JobPieceTable with cluster.spread_layers) cuts every layer into one part per
// shard, so that each server updates a share of each layer as backward finishes it, the
// embedding above all, which is finished last and needed first; shard k's wire range is then
// part k of every layer, in layer order.
#ifndef PSFORMER_PSERVER_WIRE_PIECE_TABLE_H_
#define PSFORMER_PSERVER_WIRE_PIECE_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/param_layout.h"
#include "common/proto/config.pb.h"

namespace psformer {

struct Piece {
  uint64_t begin = 0;  // wire range
  uint64_t end = 0;
  int shard = 0;
  uint64_t model_begin = 0;  // where the elements lie in the model's flat vector
  // Pushed in two parts, DENSE and ROWS (a piece of the shared embedding with
  // cluster.split_embedding; gradient_rows.h).
  bool split = false;
  uint64_t size() const { return end - begin; }
};

class PieceTable {
 public:
  // `total` elements over `shards` shards (ShardOf), cut also at `cuts` (any order; 0 and values
  // >= total are ignored) and into parts of at most max_elements (0 = no limit).
  // REQUIRES: 1 <= shards <= total.
  // With `spread` (and cuts, and shards > 1), every run between cuts is split over the shards.
  PieceTable(uint64_t total, int shards, std::vector<uint64_t> cuts = {}, uint64_t max_elements = 0,
             bool spread = false);

  // In wire order.
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Whether the model and wire orders differ (a spread table).
  bool spread() const { return spread_; }
  // Marks every piece whose elements lie in model range [0, model_end) as split.
  void SplitBelow(uint64_t model_end);
  bool has_split() const { return has_split_; }
  // Piece indices in model order.
  const std::vector<int>& model_order() const { return model_order_; }
  // A vector in wire order (a whole checkpoint's shards, one after the other) in model order.
  std::vector<float> ToModelOrder(const std::vector<float>& wire) const;
  // Calls f(model_begin, model_end, offset) for each piece's part of wire range [begin, end),
  // offset counted from `begin`.
  template <typename F>
  void ForEachModelRun(uint64_t begin, uint64_t end, F&& f) const;
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
  void CutIntoPieces(uint64_t wire_begin, uint64_t model_begin, uint64_t size, int shard, uint64_t max_elements);

  uint64_t total_;
  int shards_;
  bool spread_ = false;
  bool has_split_ = false;
  std::vector<Piece> pieces_;
  std::vector<int> first_;  // (shards + 1)
  std::vector<int> model_order_;
};

template <typename F>
void PieceTable::ForEachModelRun(uint64_t begin, uint64_t end, F&& f) const {
  for (const Piece& p : pieces_) {
    const uint64_t b = std::max(begin, p.begin), e = std::min(end, p.end);
    if (b < e) f(p.model_begin + (b - p.begin), p.model_begin + (e - p.begin), b - begin);
  }
}

// The job's table: with cluster.overlap under BSP, cut at `layer_starts` (ParamLayout::LayerStarts)
// and at cluster.piece_elements, spread over the shards with cluster.spread_layers, and the
// first layer's (the shared embedding's) pieces split with cluster.split_embedding; otherwise one
// piece per shard.
PieceTable JobPieceTable(const proto::JobConfig& config, uint64_t total, const std::vector<uint64_t>& layer_starts);
// The elements of a piece when cluster.piece_elements is 0.
constexpr uint64_t kDefaultPieceElements = uint64_t{1} << 22;
// The most elements of one piece of a layer under BSP with overlap: cluster.piece_elements, or
// kDefaultPieceElements when it is 0.
uint64_t JobPieceElements(const proto::JobConfig& config);

}  // namespace psformer

#endif  // PSFORMER_PSERVER_WIRE_PIECE_TABLE_H_
