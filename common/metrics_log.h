// metrics.jsonl of a run directory (docs/architecture.md): one JSON object per line, appended and flushed
// line by line so that a reader (or a crash) never sees half a line.
//
//   MetricsLine line;
//   line.Add("step", 100).Add("loss", 2.31);
//   PSF_RETURN_IF_ERROR(log.Write(line));
#ifndef PSFORMER_COMMON_METRICS_LOG_H_
#define PSFORMER_COMMON_METRICS_LOG_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics_parser.h"
#include "common/status.h"

namespace psformer {

// One JSON object, fields in the order added. Non-finite doubles are written as null (JSON has
// no NaN or infinity).
class MetricsLine {
 public:
  MetricsLine& Add(const std::string& key, int64_t value);
  MetricsLine& Add(const std::string& key, int value) { return Add(key, static_cast<int64_t>(value)); }
  MetricsLine& Add(const std::string& key, double value);
  MetricsLine& Add(const std::string& key, const std::string& value);
  // The object, without a newline.
  std::string ToJson() const { return "{" + body_ + "}"; }
  // The numeric fields, in the order added (integers as doubles), with the values ToJson writes.
  const std::vector<std::pair<std::string, double>>& numbers() const { return numbers_; }

 private:
  void Key(const std::string& key);
  std::string body_;
  std::vector<std::pair<std::string, double>> numbers_;
};

class MetricsLog {
 public:
  // Opens `path` for appending (created if missing).
  static StatusOr<std::unique_ptr<MetricsLog>> Open(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  Status Write(const MetricsLine& line);

 private:
  MetricsLog(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  std::FILE* file_;
  std::string path_;
};

// The numbers of each line of a metrics.jsonl, in file order (strings and nulls left out), read
// in time and memory linear in the file (line_reader.h, metrics_parser.h). A file that does not
// exist reads as no lines; IoError if it exists but cannot be read. A line that is no metrics line
// (or longer than LineReader's limit) is Corruption "PATH:LINE: column C: problem", or, when
// `problems` is given, left out and described there (the first 100).
StatusOr<std::vector<MetricsRecord>> ReadMetricsFile(const std::string& path,
                                                     std::vector<std::string>* problems = nullptr);

}  // namespace psformer

#endif  // PSFORMER_COMMON_METRICS_LOG_H_
