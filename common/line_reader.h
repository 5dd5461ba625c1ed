// Reads a text file line by line in bounded memory, whatever the file holds: a line longer than
// the limit is not kept but skipped to its end and reported, so a reader of run files (metrics,
// logs) holds at most one line of `max_line_bytes` however long a line someone wrote.
//
//   LineReader reader(path);
//   std::string line;
//   while (reader.Next(&line)) { ... reader.number() ... }
//   PSF_RETURN_IF_ERROR(reader.status());
#ifndef PSFORMER_COMMON_LINE_READER_H_
#define PSFORMER_COMMON_LINE_READER_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/status.h"

namespace psformer {

class LineReader {
 public:
  // 1 MiB: a metrics line is ~300 bytes, a log line rarely more than a few KB.
  static constexpr size_t kDefaultMaxLineBytes = size_t{1} << 20;

  // A missing file reads as no lines; one that cannot be opened otherwise sets status().
  explicit LineReader(const std::string& path, size_t max_line_bytes = kDefaultMaxLineBytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line, without its newline, that fits the limit; false at the end of the file or
  // on a read error (then status() says which). Lines over the limit are skipped and listed in
  // too_long().
  bool Next(std::string* line);

  // The number (from 1) of the line Next returned last.
  int64_t number() const { return number_; }
  // "PATH:N: the line is longer than M bytes; skipped", one per skipped line (the first 100).
  const std::vector<std::string>& too_long() const { return too_long_; }
  const Status& status() const { return status_; }

 private:
  std::string path_;
  size_t max_line_bytes_;
  std::FILE* file_ = nullptr;
  int64_t number_ = 0;
  std::vector<std::string> too_long_;
  Status status_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_LINE_READER_H_
