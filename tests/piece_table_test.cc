// PieceTable: the pieces a job's vector travels and is updated in, contiguous and spread.
#include "pserver/wire/piece_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace psformer {
namespace {

constexpr uint64_t kTotal = 100003;
const std::vector<uint64_t> kLayers = {1, 30000, 30001, 52000, 80000};

// The wire ranges tile [0, total) in order, shard k's being ShardOf(total, shards, k); the model
// ranges tile [0, total) too; no piece crosses a layer start in the model order.
void ExpectWellFormed(const PieceTable& table, const std::vector<uint64_t>& cuts, uint64_t max_elements) {
  const std::vector<Piece>& pieces = table.pieces();
  uint64_t wire = 0;
  for (int k = 0; k < table.shards(); ++k) {
    const ShardRange r = ShardOf(kTotal, table.shards(), k);
    EXPECT_EQ(table.FirstOf(k) < table.EndOf(k) ? pieces[table.FirstOf(k)].begin : r.end, r.begin);
    for (int p = table.FirstOf(k); p < table.EndOf(k); ++p) {
      EXPECT_EQ(pieces[p].shard, k);
      EXPECT_EQ(pieces[p].begin, wire);
      EXPECT_GT(pieces[p].size(), 0u);
      if (max_elements > 0) EXPECT_LE(pieces[p].size(), max_elements);
      wire = pieces[p].end;
    }
    EXPECT_EQ(wire, r.end);
  }
  uint64_t model = 0;
  for (int p : table.model_order()) {
    EXPECT_EQ(pieces[p].model_begin, model);
    model += pieces[p].size();
    for (uint64_t cut : cuts) EXPECT_FALSE(pieces[p].model_begin < cut && cut < model) << "piece crosses " << cut;
  }
  EXPECT_EQ(model, kTotal);
}

TEST(PieceTable, ContiguousTablesKeepTheModelOrder) {
  const PieceTable table(kTotal, 3, kLayers, 7000);
  EXPECT_FALSE(table.spread());
  ExpectWellFormed(table, kLayers, 7000);
  for (const Piece& p : table.pieces()) EXPECT_EQ(p.model_begin, p.begin);
}

TEST(PieceTable, SpreadTablesGiveEveryShardAPartOfEveryLargeLayer) {
  for (int shards : {2, 3, 4}) {
    SCOPED_TRACE("shards = " + std::to_string(shards));
    for (uint64_t max_elements : {uint64_t{0}, uint64_t{5000}}) {
      const PieceTable table(kTotal, shards, kLayers, max_elements, /*spread=*/true);
      ASSERT_TRUE(table.spread());
      ExpectWellFormed(table, kLayers, max_elements);
      // Layer [30001, 52000) has elements on every shard, near-equal shares (the largest layer,
      // [52000, 80000), takes the correction that makes shard sizes ShardOf's).
      std::vector<uint64_t> share(shards, 0);
      for (const Piece& p : table.pieces()) {
        if (p.model_begin >= 30001 && p.model_begin < 52000) share[p.shard] += p.size();
      }
      for (int k = 0; k < shards; ++k) EXPECT_NEAR(static_cast<double>(share[k]), 21999.0 / shards, 1.0);
    }
  }
}

TEST(PieceTable, WireOrderComesBackInModelOrder) {
  const PieceTable table(kTotal, 3, kLayers, 6000, /*spread=*/true);
  // wire[i] = the model index of wire element i, so the model order must read 0, 1, 2, ...
  std::vector<float> wire(kTotal);
  for (const Piece& p : table.pieces()) {
    for (uint64_t i = 0; i < p.size(); ++i) wire[p.begin + i] = static_cast<float>(p.model_begin + i);
  }
  const std::vector<float> model = table.ToModelOrder(wire);
  for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(model[i], static_cast<float>(i)) << i;
  // ForEachModelRun covers a wire range exactly once, at the right offsets.
  const ShardRange r = ShardOf(kTotal, 3, 1);
  uint64_t covered = 0;
  table.ForEachModelRun(r.begin + 10, r.end - 10, [&](uint64_t mb, uint64_t me, uint64_t offset) {
    for (uint64_t m = mb; m < me; ++m) ASSERT_EQ(wire[r.begin + 10 + offset + (m - mb)], static_cast<float>(m));
    covered += me - mb;
  });
  EXPECT_EQ(covered, r.size() - 20);
}

TEST(PieceTable, JobTablesSpreadOnlyUnderOverlap) {
  proto::JobConfig config;
  config.mutable_cluster()->set_servers(2);
  EXPECT_TRUE(JobPieceTable(config, kTotal, kLayers).spread());  // BSP with overlap, by default
  config.mutable_cluster()->set_spread_layers(false);
  EXPECT_FALSE(JobPieceTable(config, kTotal, kLayers).spread());
  config.mutable_cluster()->set_spread_layers(true);
  config.mutable_cluster()->set_overlap(false);
  EXPECT_FALSE(JobPieceTable(config, kTotal, kLayers).spread());
  config.mutable_cluster()->set_servers(1);
  config.mutable_cluster()->set_overlap(true);
  EXPECT_FALSE(JobPieceTable(config, kTotal, kLayers).spread());
}

}  // namespace
}  // namespace psformer
