// Reads one line of metrics.jsonl: a flat JSON object whose values are numbers, strings, true,
// false or null (what MetricsLine writes, and what a person may append by hand). One pass over
// the line, no recursion and no backtracking, so time and memory are linear in the line whatever
// it holds; anything else is refused with the column and what was expected there.
#ifndef PSFORMER_COMMON_METRICS_PARSER_H_
#define PSFORMER_COMMON_METRICS_PARSER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace psformer {

// A line's numeric fields by key (strings, booleans and nulls left out).
using MetricsRecord = std::map<std::string, double>;

struct ParsedMetricsLine {
  MetricsRecord numbers;
  std::vector<std::string> keys;  // every field's key, numeric or not, in line order
};

// InvalidArgument "column C: PROBLEM" for a line that is not such an object (a number out of
// double's range included).
StatusOr<ParsedMetricsLine> ParseMetricsLine(std::string_view line);

// The record's "step" when it has one that is a whole number in [0, 2^53] (doubles hold those
// exactly); nothing for a line without one or with a step no run logs (negative, huge, 2.5).
std::optional<int64_t> StepOf(const MetricsRecord& record);

}  // namespace psformer

#endif  // PSFORMER_COMMON_METRICS_PARSER_H_
