#include "common/line_reader.h"

#include <cerrno>
#include <cstring>

namespace psformer {
namespace {

// Reports of skipped lines kept at most: a file of a million long lines needs one message, not
// a million.
constexpr size_t kMaxReports = 100;

}  // namespace

LineReader::LineReader(const std::string& path, size_t max_line_bytes) : path_(path), max_line_bytes_(max_line_bytes) {
  file_ = std::fopen(path.c_str(), "rb");
  if (file_ == nullptr && errno != ENOENT) {
    status_ = Status::IoError("cannot open " + path + ": " + std::strerror(errno));
  }
}

LineReader::~LineReader() {
  if (file_ != nullptr) std::fclose(file_);
}

bool LineReader::Next(std::string* line) {
  if (file_ == nullptr) return false;
  for (;;) {
    line->clear();
    bool over = false;
    int c = 0;
    while ((c = getc_unlocked(file_)) != EOF && c != '\n') {
      if (line->size() < max_line_bytes_) {
        line->push_back(static_cast<char>(c));
      } else {
        over = true;  // keep reading to the newline, keeping nothing more
      }
    }
    if (std::ferror(file_)) {
      status_ = Status::IoError("cannot read " + path_ + ": " + std::strerror(errno));
      return false;
    }
    if (c == EOF && line->empty() && !over) return false;
    ++number_;
    if (!over) return true;
    if (too_long_.size() < kMaxReports) {
      too_long_.push_back(path_ + ":" + std::to_string(number_) + ": the line is longer than " +
                          std::to_string(max_line_bytes_) + " bytes; skipped");
    }
  }
}

}  // namespace psformer
