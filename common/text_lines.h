// Reading a text of one sentence per line (a corpus side, a translation to score, standard input
// to translate): every line valid UTF-8 (common/utf8.h), a last line without "\n" still counted,
// and no line longer than kMaxTextLineBytes. The bound is what keeps a wrong input (/dev/zero, a
// binary file without a newline) from growing one line until memory runs out: it fails at once,
// naming the file and line.
#ifndef PSFORMER_COMMON_TEXT_LINES_H_
#define PSFORMER_COMMON_TEXT_LINES_H_

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace psformer {

// 16 MiB: a sentence is a few hundred bytes; a whole book on one line still fits.
constexpr size_t kMaxTextLineBytes = size_t{16} << 20;

// What a "\r" before "\n" is. kKeep reads as sacreBLEU's command line does (lines end at "\n"
// only, and 13a tokenization takes the "\r" as whitespace); kDrop reads a corpus written on
// Windows as the same sentences: without the "\r" of its line ends, and without the byte order
// mark (U+FEFF) that Notepad begins a UTF-8 file with.
enum class CarriageReturn { kKeep, kDrop };

// The lines of `in`, named `name` in errors, without their "\n". IoError "cannot read NAME:
// reason"; InvalidArgument "NAME:LINE: invalid UTF-8 at byte N of the line" (then `hint`, if
// any) or "NAME:LINE: a line longer than 16 MiB ...".
StatusOr<std::vector<std::string>> ReadUtf8Lines(std::FILE* in, const std::string& name, CarriageReturn cr,
                                                 std::string_view hint = "");

// The same for the file at `path` (a missing file, a directory: IoError naming it).
StatusOr<std::vector<std::string>> ReadUtf8Lines(const std::string& path, CarriageReturn cr);

}  // namespace psformer

#endif  // PSFORMER_COMMON_TEXT_LINES_H_
