// Reading a corpus side: one sentence per line, UTF-8 checked, so that `psformer prepare`
// reports a bad byte with its file and line instead of training on mojibake.
#ifndef PSFORMER_WORKER_DATA_TEXT_LINES_H_
#define PSFORMER_WORKER_DATA_TEXT_LINES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace psformer {

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates, or code points past
// U+10FFFF). On failure, *bad_offset (if given) is the byte offset of the first bad sequence.
bool IsValidUtf8(std::string_view text, size_t* bad_offset = nullptr);

// The lines of `path` without their "\n" (or "\r\n"); a last line without a newline counts.
// Fails when the file cannot be read ("cannot read FILE: reason") or a line is not UTF-8
// ("FILE:LINE: invalid UTF-8 at byte N of the line").
StatusOr<std::vector<std::string>> ReadUtf8Lines(const std::string& path);

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_TEXT_LINES_H_
