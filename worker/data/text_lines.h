// Reading a corpus side: one sentence per line, UTF-8 checked (common/utf8.h), so that
// `psformer prepare` reports a bad byte with its file and line instead of training on mojibake.
#ifndef PSFORMER_WORKER_DATA_TEXT_LINES_H_
#define PSFORMER_WORKER_DATA_TEXT_LINES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace psformer {

// The lines of `path` without their "\n" (or "\r\n"); a last line without a newline counts.
// Fails when the file cannot be read ("cannot read FILE: reason") or a line is not UTF-8
// ("FILE:LINE: invalid UTF-8 at byte N of the line").
StatusOr<std::vector<std::string>> ReadUtf8Lines(const std::string& path);

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_TEXT_LINES_H_
