#include "common/metrics_parser.h"

#include <charconv>

namespace psformer {
namespace {

// A cursor over one line. Every method moves forward only, so a parse is one pass.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r')) ++pos_;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  bool Take(char c) {
    if (Peek() != c || AtEnd()) return false;
    ++pos_;
    return true;
  }
  bool TakeWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  Status Error(const std::string& problem) const {
    return Status::InvalidArgument("column " + std::to_string(pos_ + 1) + ": " + problem);
  }

  Status String(std::string* out);
  Status Number(double* out);

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  Status Escape(std::string* out);
  size_t Digits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ - start;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// Appends the code point `cp` (< 0x10000: \uXXXX names no more) as UTF-8.
void AppendUtf8(unsigned cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Status Cursor::Escape(std::string* out) {
  if (AtEnd()) return Error("the line ends inside a string");
  const char c = text_[pos_++];
  static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
  if (const size_t i = kFrom.find(c); i != std::string_view::npos) {
    out->push_back(kTo[i]);
    return Status::Ok();
  }
  if (c != 'u') return Error(std::string("unknown escape \\") + c + " in a string");
  unsigned cp = 0;
  for (int i = 0; i < 4; ++i) {
    const int digit = HexDigit(Peek());
    if (digit < 0) return Error("expected 4 hex digits after \\u");
    cp = cp * 16 + static_cast<unsigned>(digit);
    ++pos_;
  }
  AppendUtf8(cp, out);
  return Status::Ok();
}

Status Cursor::String(std::string* out) {
  if (!Take('"')) return Error("expected a string (\")");
  out->clear();
  while (!AtEnd()) {
    const char c = text_[pos_++];
    if (c == '"') return Status::Ok();
    if (static_cast<unsigned char>(c) < 0x20) return Error("a control character in a string");
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    PSF_RETURN_IF_ERROR(Escape(out));
  }
  return Error("the line ends inside a string (no closing \")");
}

Status Cursor::Number(double* out) {
  // JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  const size_t start = pos_;
  Take('-');
  if (!Take('0') && Digits() == 0) return Error("expected a number, a string, true, false or null");
  if (Take('.') && Digits() == 0) return Error("expected digits after the decimal point");
  bool negative_exponent = false;
  if (Take('e') || Take('E')) {
    negative_exponent = Take('-');
    if (!negative_exponent) Take('+');
    if (Digits() == 0) return Error("expected digits in the exponent");
  }
  const auto [end, error] = std::from_chars(text_.data() + start, text_.data() + pos_, *out);
  if (error == std::errc::result_out_of_range && negative_exponent) {
    *out = 0;  // too small for a double: as good as zero
    return Status::Ok();
  }
  if (error != std::errc() || end != text_.data() + pos_) return Error("a number beyond double's range");
  return Status::Ok();
}

}  // namespace

StatusOr<ParsedMetricsLine> ParseMetricsLine(std::string_view line) {
  Cursor in(line);
  ParsedMetricsLine parsed;
  in.SkipSpace();
  if (!in.Take('{')) return in.Error("expected a JSON object ({)");
  in.SkipSpace();
  bool first = true;
  std::string key, ignored;
  while (!in.Take('}')) {
    if (!first && !in.Take(',')) return in.Error(in.AtEnd() ? "the line ends inside the object" : "expected , or }");
    first = false;
    in.SkipSpace();
    PSF_RETURN_IF_ERROR(in.String(&key));
    in.SkipSpace();
    if (!in.Take(':')) return in.Error("expected : after the key");
    in.SkipSpace();
    parsed.keys.push_back(key);
    const char c = in.Peek();
    if (c == '"') {
      PSF_RETURN_IF_ERROR(in.String(&ignored));
    } else if (c == '{' || c == '[') {
      return in.Error("a nested object or array: metrics lines are flat");
    } else if (!in.TakeWord("null") && !in.TakeWord("true") && !in.TakeWord("false")) {
      double value = 0;
      PSF_RETURN_IF_ERROR(in.Number(&value));
      parsed.numbers[key] = value;
    }
    in.SkipSpace();
  }
  in.SkipSpace();
  if (!in.AtEnd()) return in.Error("text after the object's closing }");
  return parsed;
}

std::optional<int64_t> StepOf(const MetricsRecord& record) {
  const auto it = record.find("step");
  if (it == record.end()) return std::nullopt;
  const double step = it->second;
  // NaN fails both comparisons; the floor test refuses fractions.
  if (!(step >= 0 && step <= 9007199254740992.0) || step != static_cast<double>(static_cast<int64_t>(step))) {
    return std::nullopt;
  }
  return static_cast<int64_t>(step);
}

}  // namespace psformer
