// Each regex rule of mteval-v13a is a fixed-width pattern, so a left-to-right scan that either
// rewrites a two-byte match and skips past it, or copies one byte, reproduces Python's re.sub
// exactly. Working on bytes rather than code points is safe on valid UTF-8: every pattern
// character is ASCII, and ASCII bytes never occur inside a multi-byte sequence, so matches start
// and end at the same places in both views.
#include "worker/translate/tokenizer_13a.h"

#include <cstdint>

namespace psformer {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Rule 3's character class: [\{-\~\[-\` -\&\(-\+\:-\@\/] in sacreBLEU's spelling.
bool IsStandalonePunctuation(char c) {
  const auto u = static_cast<uint8_t>(c);
  return (u >= 0x7B && u <= 0x7E) || (u >= 0x5B && u <= 0x60) || (u >= 0x20 && u <= 0x26) || (u >= 0x28 && u <= 0x2B) ||
         (u >= 0x3A && u <= 0x40) || u == 0x2F;
}

// Python's str.replace: non-overlapping occurrences, left to right.
std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t start = 0;
  for (size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, start)) {
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
  }
  out.append(s.substr(start));
  return out;
}

// Python's str.rstrip() with no argument.
std::string_view RstripPython(std::string_view s) {
  size_t end = 0;  // one past the last non-space character
  for (size_t i = 0; i < s.size();) {
    const size_t space = PythonSpaceLength(s, i);
    if (space == 0) {
      ++i;
      // Step over the continuation bytes of this character in one go.
      while (i < s.size() && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) ++i;
      end = i;
    } else {
      i += space;
    }
  }
  return s.substr(0, end);
}

}  // namespace

size_t PythonSpaceLength(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return i + k < s.size() ? static_cast<uint8_t>(s[i + k]) : 0; };
  const uint8_t b0 = at(0);
  if ((b0 >= 0x09 && b0 <= 0x0D) || (b0 >= 0x1C && b0 <= 0x20)) return 1;
  if (b0 == 0xC2) return (at(1) == 0x85 || at(1) == 0xA0) ? 2 : 0;  // U+0085, U+00A0
  if (b0 == 0xE1) return (at(1) == 0x9A && at(2) == 0x80) ? 3 : 0;  // U+1680
  if (b0 == 0xE2) {
    const uint8_t b1 = at(1), b2 = at(2);
    if (b1 == 0x80 && ((b2 >= 0x80 && b2 <= 0x8A) || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF)) {
      return 3;  // U+2000..U+200A, U+2028, U+2029, U+202F
    }
    if (b1 == 0x81 && b2 == 0x9F) return 3;  // U+205F
    return 0;
  }
  if (b0 == 0xE3) return (at(1) == 0x80 && at(2) == 0x80) ? 3 : 0;  // U+3000
  return 0;
}

std::string Tokenize13a(std::string_view line) {
  std::string s = ReplaceAll(RstripPython(line), "<skipped>", "");
  s = ReplaceAll(s, "-\n", "");
  s = ReplaceAll(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    s = ReplaceAll(s, "&quot;", "\"");
    s = ReplaceAll(s, "&amp;", "&");
    s = ReplaceAll(s, "&lt;", "<");
    s = ReplaceAll(s, "&gt;", ">");
  }

  std::string a = " ";
  a.reserve(s.size() * 2 + 2);
  for (char c : s) {
    if (IsStandalonePunctuation(c)) {
      a += ' ';
      a += c;
      a += ' ';
    } else {
      a += c;
    }
  }
  a += ' ';

  // The three two-character rules. `match(x, y)` says whether the pair (x, y) is rewritten; the
  // rewrite inserts spaces at the positions `space_before`, `space_middle`, `space_after` ask.
  struct PairRule {
    bool (*match)(char, char);
    bool space_before, space_middle, space_after;
  };
  static constexpr PairRule kRules[] = {
      // ([^0-9])([\.,]) -> "\1 \2 "
      {[](char x, char y) { return !IsDigit(x) && (y == '.' || y == ','); }, false, true, true},
      // ([\.,])([^0-9]) -> " \1 \2"
      {[](char x, char y) { return (x == '.' || x == ',') && !IsDigit(y); }, true, true, false},
      // ([0-9])(-) -> "\1 \2 "
      {[](char x, char y) { return IsDigit(x) && y == '-'; }, false, true, true},
  };
  std::string b;
  for (const PairRule& rule : kRules) {
    b.clear();
    b.reserve(a.size() + a.size() / 2);
    size_t i = 0;
    while (i < a.size()) {
      if (i + 1 < a.size() && rule.match(a[i], a[i + 1])) {
        if (rule.space_before) b += ' ';
        b += a[i];
        if (rule.space_middle) b += ' ';
        b += a[i + 1];
        if (rule.space_after) b += ' ';
        i += 2;
      } else {
        b += a[i++];
      }
    }
    a.swap(b);
  }

  // ' '.join(line.split())
  std::string out;
  out.reserve(a.size());
  bool pending_space = false;
  for (size_t i = 0; i < a.size();) {
    const size_t space = PythonSpaceLength(a, i);
    if (space != 0) {
      pending_space = !out.empty();
      i += space;
    } else {
      if (pending_space) out += ' ';
      pending_space = false;
      out += a[i++];
    }
  }
  return out;
}

}  // namespace psformer
