#include "pserver/wire/gradient_rows.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace psformer {
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

Refusal Bad(std::string detail) { return Rejection{RejectReason::kBadPayload, "rows part: " + std::move(detail)}; }

// The first run of `runs` that ends after `begin`.
size_t FirstRunEndingAfter(const std::vector<ElementRun>& runs, uint64_t begin) {
  return static_cast<size_t>(
      std::partition_point(runs.begin(), runs.end(),
                           [&](const ElementRun& r) { return uint64_t{r.offset} + r.length <= begin; }) -
      runs.begin());
}

}  // namespace

bool HasRunTable(const proto::Header& h) {
  if (h.part() == proto::WHOLE) return false;
  if (h.type() == proto::PARAMS) return true;
  return h.type() == proto::PUSH && (h.part() == proto::ROWS || h.named());
}

void AppendTabledFrames(const void* data, size_t bytes, size_t table_bytes, size_t frame_bytes, size_t elem,
                        const std::shared_ptr<const void>& owner, std::vector<Frame>* out) {
  const auto* at = static_cast<const char*>(data);
  if (table_bytes > 0) out->push_back(Frame::View(at, table_bytes, owner));
  AppendViewFrames(at + table_bytes, bytes - table_bytes, frame_bytes, elem, owner, out);
}

uint64_t TabledValues(const proto::Header& h, uint64_t named) {
  const uint64_t size = h.end() - h.begin();
  if (h.part() == proto::ROWS) return named;
  return h.type() == proto::PARAMS ? size - named : size;
}

uint64_t RunTable::value_count() const {
  const size_t elem = DTypeBytes(values.header.dtype());
  return elem == 0 ? 0 : values.PayloadBytes() / elem;
}

Refusal ParseRunTable(const WireMessage& msg, RunTable* out) {
  const proto::Header& h = msg.header;
  const size_t elem = DTypeBytes(h.dtype());
  if (elem == 0) return Bad("unsupported dtype " + Str(static_cast<uint64_t>(h.dtype())));
  const uint64_t count = h.runs();
  const uint64_t size = h.end() - h.begin();
  if (count > size) return Bad(Str(count) + " runs in a range of " + Str(size) + " elements");
  if (count > 0 && (msg.payload.empty() || msg.payload[0].size() != count * kRunBytes)) {
    return Bad("the table frame must hold the " + Str(count) + " runs the header announces (" + Str(count * kRunBytes) +
               " bytes)" + (msg.payload.empty() ? "; there is no frame" : ", not " + Str(msg.payload[0].size())));
  }
  RunTable table;
  table.runs.resize(count);
  if (count > 0) std::memcpy(table.runs.data(), msg.payload[0].data(), count * kRunBytes);
  uint64_t end_of_last = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const ElementRun& r = table.runs[i];
    const uint64_t end = uint64_t{r.offset} + r.length;
    if (r.length == 0 || end > size || (i > 0 && r.offset < end_of_last)) {
      return Bad("run " + Str(i) + " [" + Str(r.offset) + ", " + Str(end) + ") is empty, outside the range's " +
                 Str(size) + " elements, or not after the run before it");
    }
    table.named += r.length;
    end_of_last = end;
  }
  for (size_t f = count > 0 ? 1 : 0; f < msg.payload.size(); ++f) {
    if (msg.payload[f].size() % elem != 0) return Bad("value frame " + Str(f) + " splits an element");
  }
  table.values.header = h;
  table.values.payload.assign(msg.payload.begin() + (count > 0 ? 1 : 0), msg.payload.end());
  *out = std::move(table);
  return std::nullopt;
}

Refusal ParseRows(const WireMessage& msg, RowsGradient* out) {
  RunTable table;
  if (Refusal bad = ParseRunTable(msg, &table)) return bad;
  const size_t elem = DTypeBytes(msg.header.dtype());
  if (table.values.PayloadBytes() != table.named * elem) {
    return Bad(Str(table.values.PayloadBytes()) + " value bytes for runs of " + Str(table.named) + " elements of " +
               Str(elem) + " bytes");
  }
  RowsGradient rows;
  rows.runs = std::move(table.runs);
  rows.value_at.resize(rows.runs.size());
  uint64_t values = 0;
  for (size_t i = 0; i < rows.runs.size(); ++i) {
    rows.value_at[i] = values;
    values += rows.runs[i].length;
  }
  rows.values = std::move(table.values);
  *out = std::move(rows);
  return std::nullopt;
}

std::vector<ElementRun> MergedRuns(std::vector<ElementRun> all) {
  std::sort(all.begin(), all.end(), [](const ElementRun& a, const ElementRun& b) { return a.offset < b.offset; });
  std::vector<ElementRun> merged;
  for (const ElementRun& r : all) {
    if (!merged.empty()) {
      ElementRun& last = merged.back();
      const uint64_t last_end = uint64_t{last.offset} + last.length;
      if (r.offset <= last_end) {
        last.length = static_cast<uint32_t>(std::max<uint64_t>(last_end, uint64_t{r.offset} + r.length) - last.offset);
        continue;
      }
    }
    merged.push_back(r);
  }
  return merged;
}

std::vector<uint64_t> RunStarts(std::span<const ElementRun> runs) {
  std::vector<uint64_t> starts(runs.size() + 1, 0);
  for (size_t i = 0; i < runs.size(); ++i) starts[i + 1] = starts[i] + runs[i].length;
  return starts;
}

std::vector<ElementRun> ComplementRuns(std::span<const ElementRun> runs, uint64_t size) {
  std::vector<ElementRun> gaps;
  uint64_t at = 0;
  for (const ElementRun& r : runs) {
    if (r.offset > at) gaps.push_back(ElementRun{static_cast<uint32_t>(at), static_cast<uint32_t>(r.offset - at)});
    at = uint64_t{r.offset} + r.length;
  }
  if (at < size) gaps.push_back(ElementRun{static_cast<uint32_t>(at), static_cast<uint32_t>(size - at)});
  return gaps;
}

bool RunsWithin(std::span<const ElementRun> inner, std::span<const ElementRun> outer) {
  size_t o = 0;
  for (const ElementRun& r : inner) {
    while (o < outer.size() && uint64_t{outer[o].offset} + outer[o].length <= r.offset) ++o;
    if (o == outer.size() || outer[o].offset > r.offset ||
        uint64_t{outer[o].offset} + outer[o].length < uint64_t{r.offset} + r.length) {
      return false;
    }
  }
  return true;
}

namespace {

// sum[i - begin] = the ROWS parts' values of element i summed in the parts' order, and
// named[i - begin] = 1, for every element of [begin, end) some part names.
void SumRowsBlock(std::span<const RowsGradient* const> rows, uint64_t begin, uint64_t end, float* sum, uint8_t* named) {
  for (const RowsGradient* part : rows) {
    for (size_t r = FirstRunEndingAfter(part->runs, begin); r < part->runs.size(); ++r) {
      const ElementRun& run = part->runs[r];
      if (run.offset >= end) break;
      const uint64_t b = std::max<uint64_t>(begin, run.offset);
      const uint64_t e = std::min<uint64_t>(end, uint64_t{run.offset} + run.length);
      // Stretches that the parts before all named (added to) or none named (assigned).
      for (uint64_t i = b; i < e;) {
        const bool add = named[i - begin] != 0;
        uint64_t j = i + 1;
        while (j < e && (named[j - begin] != 0) == add) ++j;
        const uint64_t v = part->value_at[r] + (i - run.offset);
        AddPayloadRange(part->values, v, v + (j - i), sum + (i - begin), /*assign=*/!add);
        if (!add) std::fill(named + (i - begin), named + (j - begin), uint8_t{1});
        i = j;
      }
    }
  }
}

}  // namespace

void AddRowsInOrder(std::span<const RowsGradient* const> rows, uint64_t begin, uint64_t end, float* out) {
  // Called for every block of a split piece's update: most blocks of a large vocabulary hold no
  // looked-up row, and those cost a search per part, no scratch.
  const auto reaches = [&](const RowsGradient* part) {
    const size_t r = FirstRunEndingAfter(part->runs, begin);
    return r < part->runs.size() && part->runs[r].offset < end;
  };
  if (begin >= end || std::none_of(rows.begin(), rows.end(), reaches)) return;
  const size_t n = end - begin;
  const std::unique_ptr<float[]> sum(new float[n]);  // written where named
  std::vector<uint8_t> named(n, 0);
  SumRowsBlock(rows, begin, end, sum.get(), named.data());
  for (size_t i = 0; i < n; ++i) {
    if (named[i] != 0) out[i] += sum[i];
  }
}

SummedRows SumRows(std::span<const RowsGradient* const> rows) {
  std::vector<ElementRun> all;
  for (const RowsGradient* part : rows) all.insert(all.end(), part->runs.begin(), part->runs.end());
  SummedRows summed;
  summed.runs = MergedRuns(std::move(all));  // the union of the runs
  uint64_t total = 0;
  for (const ElementRun& r : summed.runs) total += r.length;
  summed.values.resize(total);
  uint64_t at = 0;
  for (const ElementRun& r : summed.runs) {
    // Some part names every element of a union run: the sum is the parts' values alone.
    std::vector<uint8_t> named(r.length, 0);
    SumRowsBlock(rows, r.offset, uint64_t{r.offset} + r.length, summed.values.data() + at, named.data());
    at += r.length;
  }
  return summed;
}

std::vector<ElementRun> RunsOfRows(std::span<const int32_t> rows, uint64_t width, uint64_t model_begin, uint64_t size,
                                   uint64_t* first_value) {
  std::vector<ElementRun> runs;
  const uint64_t model_end = model_begin + size;
  // The first row that ends after model_begin.
  const size_t first = static_cast<size_t>(
      std::partition_point(rows.begin(), rows.end(),
                           [&](int32_t row) { return (static_cast<uint64_t>(row) + 1) * width <= model_begin; }) -
      rows.begin());
  *first_value = first * width;
  for (size_t i = first; i < rows.size(); ++i) {
    const uint64_t b = static_cast<uint64_t>(rows[i]) * width, e = b + width;
    if (b >= model_end) break;
    const uint64_t rb = std::max(b, model_begin), re = std::min(e, model_end);
    if (i == first) *first_value += rb - b;
    runs.push_back(ElementRun{static_cast<uint32_t>(rb - model_begin), static_cast<uint32_t>(re - rb)});
  }
  return runs;
}

}  // namespace psformer
