#include "worker/data/text_lines.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace psformer {

bool IsValidUtf8(std::string_view text, size_t* bad_offset) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    size_t length;
    uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2;
      code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3;
      code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4;
      code = c & 0x07;
    } else {
      length = 0;  // a continuation byte where a sequence should start, or 0xF8..0xFF
      code = 0;
    }
    bool ok = length != 0 && i + length <= n;
    for (size_t k = 1; ok && k < length; ++k) {
      ok = (s[i + k] & 0xC0) == 0x80;
      code = (code << 6) | (s[i + k] & 0x3F);
    }
    // The shortest form only, no UTF-16 surrogates, nothing past Unicode's last code point.
    static constexpr uint32_t kSmallest[5] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && code >= kSmallest[length] && code <= 0x10FFFF && !(code >= 0xD800 && code <= 0xDFFF);
    if (!ok) {
      if (bad_offset != nullptr) *bad_offset = i;
      return false;
    }
    i += length;
  }
  return true;
}

StatusOr<std::vector<std::string>> ReadUtf8Lines(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::IoError("cannot read " + path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError("cannot read " + path + ": " + std::strerror(errno));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t bad = 0;
    if (!IsValidUtf8(line, &bad)) {
      return Status::InvalidArgument(path + ":" + std::to_string(lines.size() + 1) + ": invalid UTF-8 at byte " +
                                     std::to_string(bad + 1) + " of the line");
    }
    lines.push_back(std::move(line));
    line.clear();
  }
  if (in.bad()) return Status::IoError("cannot read " + path + ": " + std::strerror(errno));
  return lines;
}

}  // namespace psformer
