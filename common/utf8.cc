#include "common/utf8.h"

#include <cstdint>

namespace psformer {

bool IsValidUtf8(std::string_view s, size_t* bad_offset) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = static_cast<uint8_t>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    // Sequence length and the allowed range of the second byte (RFC 3629, table 3-7 of the
    // Unicode standard): the narrowed ranges exclude overlongs, surrogates and > U+10FFFF.
    size_t length = 0;
    uint8_t low = 0x80, high = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      length = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      length = 3;
      if (b0 == 0xE0) low = 0xA0;
      if (b0 == 0xED) high = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      length = 4;
      if (b0 == 0xF0) low = 0x90;
      if (b0 == 0xF4) high = 0x8F;
    }
    bool ok = length != 0 && i + length <= n;
    for (size_t k = 1; ok && k < length; ++k) {
      const uint8_t b = static_cast<uint8_t>(s[i + k]);
      ok = k == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
    }
    if (!ok) {
      if (bad_offset != nullptr) *bad_offset = i;
      return false;
    }
    i += length;
  }
  return true;
}

}  // namespace psformer
