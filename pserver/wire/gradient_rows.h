// The lookups' part of a shared-embedding piece's gradient (proto::ROWS, docs/wire-protocol.md,
// "The embedding in two parts"): only the elements of the rows a step's tokens looked up, as
// element runs of the piece. The payload's first frame is the run table, `runs` pairs of
// little-endian uint32 (offset from the message's begin, length), ascending and disjoint; the
// frames after it hold the runs' values one after the other, in the message's dtype.
//
// A piece's gradient is then dense + rows: the workers' DENSE parts summed in worker order (as
// every piece's), the workers' ROWS parts summed in worker order where any has the element, and
// the two added. An element no ROWS part names keeps the dense sum, exactly what a zero lookup
// gradient would leave. Summing every ROWS part of a host group first (a group's aggregator)
// and then the groups' sums is the flat sum's arithmetic when one group holds every worker.
#ifndef PSFORMER_PSERVER_WIRE_GRADIENT_ROWS_H_
#define PSFORMER_PSERVER_WIRE_GRADIENT_ROWS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pserver/wire/wire_message.h"

namespace psformer {

struct ElementRun {
  uint32_t offset = 0;  // from the message's (the piece's) begin
  uint32_t length = 0;
  friend bool operator==(const ElementRun&, const ElementRun&) = default;
};
constexpr size_t kRunBytes = 2 * sizeof(uint32_t);

// A ROWS push as a sum reads it.
struct RowsGradient {
  std::vector<ElementRun> runs;
  std::vector<uint64_t> value_at;  // (runs) the index of each run's first value
  WireMessage values;              // the payload's frames after the table; the header's dtype
  uint64_t elements() const { return value_at.empty() ? 0 : value_at.back() + runs.back().length; }
};

// A payload that begins with a run table (header.runs() runs; none: no table frame): a ROWS push,
// a named DENSE push, PARAMS of a part. Checks the table (each run non-empty, ascending,
// disjoint, inside the message's range) and that the frames after it hold whole elements; fills
// `runs`, `named` (the elements the runs cover) and `values` (a view of the frames after the
// table, with msg's header). The caller checks the value count, which depends on the kind.
struct RunTable {
  std::vector<ElementRun> runs;
  uint64_t named = 0;
  WireMessage values;
  uint64_t value_count() const;
};
Refusal ParseRunTable(const WireMessage& msg, RunTable* out);
// How many values a message with a run table of `named` elements carries: a ROWS push's and a
// ROWS PARAMS' the named ones, a DENSE push's the whole range, a DENSE PARAMS' the rest.
uint64_t TabledValues(const proto::Header& h, uint64_t named);
// Whether a message's payload begins with a run table.
bool HasRunTable(const proto::Header& h);
// The frames of a payload laid out as one buffer, `table_bytes` of run table (a frame of its own,
// when any) and then the values (frames of frame_bytes, whole elements of `elem` bytes), each
// frame a view kept alive by `owner`.
void AppendTabledFrames(const void* data, size_t bytes, size_t table_bytes, size_t frame_bytes, size_t elem,
                        const std::shared_ptr<const void>& owner, std::vector<Frame>* out);

// Runs ascending, the touching and overlapping ones merged.
std::vector<ElementRun> MergedRuns(std::vector<ElementRun> runs);
// The elements of [0, size) no run of `runs` (ascending, disjoint) covers, as runs.
std::vector<ElementRun> ComplementRuns(std::span<const ElementRun> runs, uint64_t size);
// Whether every run of `inner` lies within the union of `outer` (both ascending, disjoint; outer
// merged).
bool RunsWithin(std::span<const ElementRun> inner, std::span<const ElementRun> outer);

// The runs' elements laid end to end (as a run table's values lie): run i's begin at starts[i],
// and starts.back() is their count.
std::vector<uint64_t> RunStarts(std::span<const ElementRun> runs);
// Calls fn(i, first, last) for each run i that elements [begin, end) of the runs laid end to end
// cover, [first, last) the covered elements counted from run i's start, in order: the part of
// the runs one thread of a ParallelFor over [0, starts.back()) takes.
template <typename Fn>
void ForEachRunPart(const std::vector<uint64_t>& starts, uint64_t begin, uint64_t end, Fn fn) {
  size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
  for (uint64_t at = begin; at < end; ++i) {
    const uint64_t stop = std::min(end, starts[i + 1]);
    if (stop > at) fn(i, at - starts[i], stop - starts[i]);
    at = stop;
  }
}

// Checks what a ROWS payload says of itself: a table frame of exactly header.runs() runs, each
// non-empty, ascending, disjoint and inside [begin, end), value frames of whole elements, and as
// many values as the runs hold. On success fills `out` (a view: `msg`'s frames stay its owner's).
// REQUIRES: payload size and CRC checked (message_validator.h).
Refusal ParseRows(const WireMessage& msg, RowsGradient* out);

// Adds the ROWS parts to out[0, end - begin), elements [begin, end) of the piece (offsets from
// its begin): for each element some part names, r = the first such part's value + the next's ...
// in the parts' order, then out += r. Elements no part names are left as they are.
void AddRowsInOrder(std::span<const RowsGradient* const> rows, uint64_t begin, uint64_t end, float* out);

// A sum of ROWS parts as one: the union of their runs (touching runs merged) and, in fp32, the
// sum AddRowsInOrder makes of each element. For a host group's aggregator.
struct SummedRows {
  std::vector<ElementRun> runs;
  std::vector<float> values;
};
SummedRows SumRows(std::span<const RowsGradient* const> rows);

// The runs of `rows` (ascending, distinct row indices of `width` elements, in the model's flat
// vector) inside the model range [model_begin, model_begin + size), offsets from model_begin; and
// in `*first_value` the index, in the rows' values (rows.size() x width), of the first element
// they cover: the runs' values lie there one after the other.
std::vector<ElementRun> RunsOfRows(std::span<const int32_t> rows, uint64_t width, uint64_t model_begin, uint64_t size,
                                   uint64_t* first_value);

}  // namespace psformer

#endif  // PSFORMER_PSERVER_WIRE_GRADIENT_ROWS_H_
