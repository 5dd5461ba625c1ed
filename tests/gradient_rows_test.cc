// The lookups' part of an embedding piece's gradient (pserver/wire/gradient_rows.h): its run
// table checked, its sum in the parts' order against an fp64 reference of the same order, the
// union a host group sends, and the runs a worker's rows make of a piece.
#include "pserver/wire/gradient_rows.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>

#include "common/bfloat16.h"

namespace psformer {
namespace {

// A validated-looking ROWS message of piece [begin, begin + size) with these runs and values
// (fp32), the table in frame 0 and the values in frames of at most `frame_elements`.
WireMessage RowsMessage(uint64_t begin, uint64_t size, const std::vector<ElementRun>& runs,
                        const std::vector<float>& values, size_t frame_elements = 3) {
  WireMessage m;
  m.header.set_type(proto::PUSH);
  m.header.set_part(proto::ROWS);
  m.header.set_dtype(proto::FLOAT32);
  m.header.set_begin(begin);
  m.header.set_end(begin + size);
  m.header.set_runs(static_cast<uint32_t>(runs.size()));
  if (!runs.empty()) m.payload.push_back(Frame::Copy(runs.data(), runs.size() * kRunBytes));
  for (size_t i = 0; i < values.size(); i += frame_elements) {
    const size_t n = std::min(frame_elements, values.size() - i);
    m.payload.push_back(Frame::Copy(values.data() + i, n * sizeof(float)));
  }
  return m;
}

std::string Refused(const WireMessage& m) {
  RowsGradient rows;
  const Refusal r = ParseRows(m, &rows);
  return r ? r->detail : "";
}

TEST(GradientRows, ParsesRunsAndWhereTheirValuesBegin) {
  const WireMessage m = RowsMessage(100, 20, {{2, 3}, {10, 4}}, {1, 2, 3, 4, 5, 6, 7});
  RowsGradient rows;
  ASSERT_FALSE(ParseRows(m, &rows));
  ASSERT_EQ(rows.runs.size(), 2u);
  EXPECT_EQ(rows.value_at, (std::vector<uint64_t>{0, 3}));
  EXPECT_EQ(rows.elements(), 7u);
}

TEST(GradientRows, RefusesATableThatDoesNotDescribeThePayload) {
  EXPECT_EQ(Refused(RowsMessage(0, 20, {{2, 3}}, {1, 2, 3})), "");
  EXPECT_NE(Refused(RowsMessage(0, 20, {{2, 3}}, {1, 2})), "") << "too few values";
  EXPECT_NE(Refused(RowsMessage(0, 20, {{2, 3}}, {1, 2, 3, 4})), "") << "too many values";
  EXPECT_NE(Refused(RowsMessage(0, 20, {{18, 3}}, {1, 2, 3})), "") << "run past the piece";
  EXPECT_NE(Refused(RowsMessage(0, 20, {{2, 0}}, {})), "") << "empty run";
  EXPECT_NE(Refused(RowsMessage(0, 20, {{5, 3}, {6, 1}}, {1, 2, 3, 4})), "") << "overlapping runs";
  EXPECT_NE(Refused(RowsMessage(0, 20, {{5, 1}, {2, 1}}, {1, 2})), "") << "runs out of order";
  WireMessage wrong_count = RowsMessage(0, 20, {{2, 3}}, {1, 2, 3});
  wrong_count.header.set_runs(2);
  EXPECT_NE(Refused(wrong_count), "") << "the header announces another count";
  WireMessage split_element = RowsMessage(0, 20, {{2, 1}}, {1});
  split_element.payload[1] = Frame::Copy("abc", 3);
  EXPECT_NE(Refused(split_element), "") << "a value frame splitting an element";
  WireMessage no_table = RowsMessage(0, 20, {}, {});
  no_table.header.set_runs(1);
  EXPECT_NE(Refused(no_table), "") << "runs announced, no frame";
  EXPECT_EQ(Refused(RowsMessage(0, 20, {}, {})), "") << "a batch that touched nothing of the piece";
}

// Three parts with overlapping, partly disjoint runs: each element named by some part gets the
// named parts' values summed in the parts' order (the first assigned, not added to 0), added to
// out; the others keep out as it was. Checked for every block split of the piece.
TEST(GradientRows, AddsThePartsInTheirOrderWhereAnyNamesTheElement) {
  const uint64_t size = 30;
  const std::vector<std::vector<ElementRun>> runs = {{{0, 4}, {10, 6}}, {{2, 4}, {12, 2}, {20, 5}}, {{13, 9}}};
  std::vector<WireMessage> messages;
  std::vector<RowsGradient> parsed(runs.size());
  std::vector<std::map<uint64_t, float>> named(runs.size());  // element -> value, per part
  for (size_t p = 0; p < runs.size(); ++p) {
    std::vector<float> values;
    for (const ElementRun& r : runs[p]) {
      for (uint32_t i = 0; i < r.length; ++i) {
        const float v = 0.1f * std::sin(1.0f + p * 7.3f + (r.offset + i) * 0.91f) * (1 + p * 1000.0f);
        values.push_back(v);
        named[p][r.offset + i] = v;
      }
    }
    messages.push_back(RowsMessage(500, size, runs[p], values));
  }
  for (size_t p = 0; p < runs.size(); ++p) ASSERT_FALSE(ParseRows(messages[p], &parsed[p]));
  const std::vector<const RowsGradient*> parts = {&parsed[0], &parsed[1], &parsed[2]};
  std::vector<float> dense(size);
  for (uint64_t i = 0; i < size; ++i) dense[i] = 3.0f + 0.01f * static_cast<float>(i);
  // The reference: the same order in fp32, and in fp64 to show it is the sum.
  std::vector<float> expected = dense;
  for (uint64_t i = 0; i < size; ++i) {
    bool any = false;
    float r = 0;
    double r64 = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      if (!named[p].count(i)) continue;
      r = any ? r + named[p][i] : named[p][i];
      r64 += named[p][i];
      any = true;
    }
    if (any) {
      expected[i] = dense[i] + r;
      EXPECT_NEAR(expected[i], dense[i] + r64, 1e-6 * (std::fabs(dense[i]) + std::fabs(r64)));
    }
  }
  for (uint64_t block : {uint64_t{1}, uint64_t{7}, size}) {
    std::vector<float> out = dense;
    for (uint64_t b = 0; b < size; b += block) AddRowsInOrder(parts, b, std::min(size, b + block), out.data() + b);
    for (uint64_t i = 0; i < size; ++i) {
      EXPECT_EQ(std::memcmp(&out[i], &expected[i], sizeof(float)), 0) << "element " << i << " block " << block;
    }
  }
  // Untouched elements keep the dense value exactly: a lookup gradient of zeros leaves it so.
  std::vector<float> out = dense;
  AddRowsInOrder(parts, 0, size, out.data());
  for (uint64_t i : {6u, 7u, 8u, 9u, 25u, 29u}) EXPECT_EQ(out[i], dense[i]) << i;
}

TEST(GradientRows, AGroupsSumIsTheUnionOfItsRunsWithTheSameAdditions) {
  const std::vector<std::vector<ElementRun>> runs = {{{0, 4}, {10, 2}}, {{3, 3}, {12, 2}, {20, 1}}};
  std::vector<WireMessage> messages;
  std::vector<RowsGradient> parsed(runs.size());
  for (size_t p = 0; p < runs.size(); ++p) {
    std::vector<float> values;
    for (const ElementRun& r : runs[p]) {
      for (uint32_t i = 0; i < r.length; ++i)
        values.push_back(static_cast<float>(p + 1) * 0.3f + 0.01f * (r.offset + i));
    }
    messages.push_back(RowsMessage(0, 30, runs[p], values));
    ASSERT_FALSE(ParseRows(messages[p], &parsed[p]));
  }
  const std::vector<const RowsGradient*> parts = {&parsed[0], &parsed[1]};
  const SummedRows sum = SumRows(parts);
  // [0,4) and [3,6) overlap, [10,12) and [12,14) touch: merged; [20,21) alone.
  ASSERT_EQ(sum.runs.size(), 3u);
  EXPECT_EQ(sum.runs[0].offset, 0u);
  EXPECT_EQ(sum.runs[0].length, 6u);
  EXPECT_EQ(sum.runs[1].offset, 10u);
  EXPECT_EQ(sum.runs[1].length, 4u);
  EXPECT_EQ(sum.runs[2].offset, 20u);
  EXPECT_EQ(sum.runs[2].length, 1u);
  ASSERT_EQ(sum.values.size(), 11u);
  // Sent on as one part, it adds what the two parts add, bit for bit.
  WireMessage one = RowsMessage(0, 30, sum.runs, sum.values);
  RowsGradient summed;
  ASSERT_FALSE(ParseRows(one, &summed));
  std::vector<float> a(30, 1.5f), b(30, 1.5f);
  AddRowsInOrder(parts, 0, 30, a.data());
  const std::vector<const RowsGradient*> single = {&summed};
  AddRowsInOrder(single, 0, 30, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(GradientRows, RowsMakeRunsOfAPieceAndWhereTheirValuesLie) {
  // Rows of width 4 in a piece [6, 21) of the model's vector: row 1 [4,8) is cut to [6,8), row 5
  // [20,24) to [20,21); row 7 lies outside.
  const std::vector<int32_t> rows = {0, 1, 3, 5, 7};
  uint64_t first = 0;
  const std::vector<ElementRun> runs = RunsOfRows(rows, 4, 6, 15, &first);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(first, 1u * 4 + 2);  // row 1's third value
  EXPECT_EQ(runs[0].offset, 0u);
  EXPECT_EQ(runs[0].length, 2u);
  EXPECT_EQ(runs[1].offset, 12u - 6);
  EXPECT_EQ(runs[1].length, 4u);
  EXPECT_EQ(runs[2].offset, 20u - 6);
  EXPECT_EQ(runs[2].length, 1u);
  // A piece no row reaches has no runs.
  EXPECT_TRUE(RunsOfRows(rows, 4, 32, 4, &first).empty());
}

// Run tables the named rows make: merged, complemented, compared.
TEST(GradientRows, RunsMergeComplementAndNest) {
  EXPECT_EQ(MergedRuns({{10, 2}, {0, 4}, {4, 2}, {11, 3}, {20, 1}}),
            (std::vector<ElementRun>{{0, 6}, {10, 4}, {20, 1}}));
  EXPECT_TRUE(MergedRuns({}).empty());
  const std::vector<ElementRun> runs = {{0, 6}, {10, 4}, {20, 1}};
  EXPECT_EQ(ComplementRuns(runs, 25), (std::vector<ElementRun>{{6, 4}, {14, 6}, {21, 4}}));
  EXPECT_EQ(ComplementRuns(runs, 21), (std::vector<ElementRun>{{6, 4}, {14, 6}}));
  EXPECT_EQ(ComplementRuns({}, 7), (std::vector<ElementRun>{{0, 7}}));
  EXPECT_TRUE(ComplementRuns(std::vector<ElementRun>{{0, 7}}, 7).empty());
  EXPECT_TRUE(RunsWithin(std::vector<ElementRun>{{1, 2}, {10, 1}, {12, 2}, {20, 1}}, runs));
  EXPECT_TRUE(RunsWithin({}, runs));
  EXPECT_FALSE(RunsWithin(std::vector<ElementRun>{{5, 2}}, runs)) << "past a run's end";
  EXPECT_FALSE(RunsWithin(std::vector<ElementRun>{{8, 1}}, runs)) << "between runs";
  EXPECT_FALSE(RunsWithin(std::vector<ElementRun>{{19, 2}}, runs)) << "before a run's begin";
  EXPECT_FALSE(RunsWithin(std::vector<ElementRun>{{0, 1}}, {})) << "nothing named";
}

// PARAMS of a part and a named DENSE push carry a table too: how many values follow it.
TEST(GradientRows, TablesOfEveryKindAnnounceTheirValues) {
  WireMessage m = RowsMessage(100, 20, {{2, 3}, {10, 4}}, std::vector<float>(13, 1.f));
  m.header.set_type(proto::PARAMS);
  m.header.set_part(proto::DENSE);
  ASSERT_TRUE(HasRunTable(m.header));
  RunTable table;
  ASSERT_FALSE(ParseRunTable(m, &table));
  EXPECT_EQ(table.named, 7u);
  EXPECT_EQ(table.value_count(), 13u);
  EXPECT_EQ(TabledValues(m.header, table.named), 13u) << "PARAMS DENSE: the rest of the piece";
  m.header.set_part(proto::ROWS);
  EXPECT_EQ(TabledValues(m.header, table.named), 7u) << "PARAMS ROWS: the named runs";
  m.header.set_type(proto::PUSH);
  m.header.set_part(proto::DENSE);
  EXPECT_FALSE(HasRunTable(m.header)) << "a DENSE push names nothing unless it says so";
  m.header.set_named(true);
  EXPECT_TRUE(HasRunTable(m.header));
  EXPECT_EQ(TabledValues(m.header, table.named), 20u) << "a named DENSE push: the whole piece";
}

// The runs' elements laid end to end, cut anywhere: each part names its runs and their covered
// elements in order, and the parts together cover every element of every run once.
TEST(GradientRows, RunPartsCoverTheRunsLaidEndToEnd) {
  const std::vector<ElementRun> runs = {{3, 4}, {10, 1}, {20, 5}};
  const std::vector<uint64_t> starts = RunStarts(runs);
  EXPECT_EQ(starts, (std::vector<uint64_t>{0, 4, 5, 10}));
  const auto parts = [&](uint64_t begin, uint64_t end) {
    std::vector<std::array<uint64_t, 3>> out;
    ForEachRunPart(starts, begin, end, [&](size_t r, uint64_t first, uint64_t last) {
      out.push_back({r, first, last});
    });
    return out;
  };
  EXPECT_EQ(parts(0, 10), (std::vector<std::array<uint64_t, 3>>{{0, 0, 4}, {1, 0, 1}, {2, 0, 5}}));
  EXPECT_EQ(parts(2, 7), (std::vector<std::array<uint64_t, 3>>{{0, 2, 4}, {1, 0, 1}, {2, 0, 2}}));
  EXPECT_EQ(parts(5, 6), (std::vector<std::array<uint64_t, 3>>{{2, 0, 1}}));
  EXPECT_TRUE(parts(4, 4).empty());
  EXPECT_EQ(RunStarts({}), std::vector<uint64_t>{0});
}

}  // namespace
}  // namespace psformer
