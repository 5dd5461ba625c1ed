// JSON string literals for the files psformer writes as JSON (metrics.jsonl, the exported
// model's config and vocabulary): one escaping rule for all of them.
#ifndef PSFORMER_COMMON_JSON_TEXT_H_
#define PSFORMER_COMMON_JSON_TEXT_H_

#include <string>

namespace psformer {

// `s` as a JSON string literal, quotes included: '"' and '\' escaped, control characters as
// \u00XX, every other byte as it is (UTF-8 passes through unchanged).
std::string JsonQuote(const std::string& s);

}  // namespace psformer

#endif  // PSFORMER_COMMON_JSON_TEXT_H_
