// Reading a plain-text corpus file as lines, the way sacreBLEU's command line does: lines end at
// "\n" only (a "\r" before it stays, and 13a tokenization treats it as whitespace), and a last line
// without "\n" still counts. Every line must be valid UTF-8.
#ifndef PSFORMER_WORKER_TRANSLATE_TEXT_LINES_H_
#define PSFORMER_WORKER_TRANSLATE_TEXT_LINES_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace psformer {

// The lines of `path`, without their "\n". IoError naming the file if it cannot be opened or read
// (a missing file, a directory); InvalidArgument "PATH:LINE: invalid UTF-8 ..." for a bad line.
StatusOr<std::vector<std::string>> ReadTextLines(const std::string& path);

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_TEXT_LINES_H_
