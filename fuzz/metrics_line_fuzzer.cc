// libFuzzer target for the reader of metrics.jsonl lines (common/metrics_parser.h), which
// `status`, `plot`, a resumed worker and the supervisors run on whatever the file holds. Nothing
// may crash, recurse without bound or hit undefined behaviour; a line that parses must give each
// number a key of the line, and a step only when it is a whole number. Built and run by
// scripts/fuzz metrics_line; seeds in fuzz/seeds/metrics_line/.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/metrics_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace psformer;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto parsed = ParseMetricsLine(line);
  if (!parsed.ok()) {
    if (parsed.status().message().rfind("column ", 0) != 0) std::abort();  // every refusal names its column
    return 0;
  }
  for (const auto& [key, value] : parsed->numbers) {
    if (std::find(parsed->keys.begin(), parsed->keys.end(), key) == parsed->keys.end()) std::abort();
    (void)value;
  }
  if (const auto step = StepOf(parsed->numbers);
      step && (*step < 0 || static_cast<double>(*step) != parsed->numbers["step"])) {
    std::abort();
  }
  return 0;
}
