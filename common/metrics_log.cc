#include "common/metrics_log.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/json_text.h"
#include "common/line_reader.h"

namespace psformer {
namespace {

// Problems described at most: one broken file needs a few lines of report, not one per line.
constexpr size_t kMaxProblems = 100;

}  // namespace

void MetricsLine::Key(const std::string& key) {
  if (!body_.empty()) body_ += ", ";
  body_ += JsonQuote(key) + ": ";
}

MetricsLine& MetricsLine::Add(const std::string& key, int64_t value) {
  Key(key);
  body_ += std::to_string(value);
  numbers_.emplace_back(key, static_cast<double>(value));
  return *this;
}

MetricsLine& MetricsLine::Add(const std::string& key, double value) {
  Key(key);
  if (!std::isfinite(value)) {
    numbers_.emplace_back(key, value);
    body_ += "null";
  } else {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.9g", value);
    body_ += buf;
    // The value as written: TensorBoard's float32 copy must be that of the line's number, which
    // the full double, rounded to float32 on its own, is not always (10119.96337 -> "10119.9634").
    numbers_.emplace_back(key, std::strtod(buf, nullptr));
  }
  return *this;
}

MetricsLine& MetricsLine::Add(const std::string& key, const std::string& value) {
  Key(key);
  body_ += JsonQuote(value);
  return *this;
}

StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return Status::IoError("cannot open " + path + " for appending: " + std::strerror(errno));
  return std::unique_ptr<MetricsLog>(new MetricsLog(f, path));
}

MetricsLog::~MetricsLog() { std::fclose(file_); }

Status MetricsLog::Write(const MetricsLine& line) {
  const std::string text = line.ToJson() + "\n";
  const long before = std::ftell(file_);
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    const int error = errno;
    // A line cut short (a full disk) would be one that readers skip as unreadable, and a resumed
    // run would append after it: the file goes back to where the line began.
    if (before >= 0) {
      std::clearerr(file_);
      if (ftruncate(fileno(file_), before) == 0) std::fseek(file_, before, SEEK_SET);
    }
    return Status::IoError("cannot write to " + path_ + ": " + std::strerror(error));
  }
  return Status::Ok();
}

StatusOr<std::vector<MetricsRecord>> ReadMetricsFile(const std::string& path, std::vector<std::string>* problems) {
  std::vector<MetricsRecord> records;
  LineReader reader(path);
  std::string line;
  while (reader.Next(&line)) {
    if (line.empty()) continue;
    auto parsed = ParseMetricsLine(line);
    if (!parsed.ok()) {
      const std::string problem = path + ":" + std::to_string(reader.number()) + ": " + parsed.status().message();
      if (problems == nullptr) return Status::Corruption(problem);
      if (problems->size() < kMaxProblems) problems->push_back(problem + "; line skipped");
      continue;
    }
    if (!parsed->numbers.empty()) records.push_back(std::move(parsed->numbers));
  }
  PSF_RETURN_IF_ERROR(reader.status());
  if (!reader.too_long().empty() && problems == nullptr) return Status::Corruption(reader.too_long().front());
  if (problems != nullptr) problems->insert(problems->end(), reader.too_long().begin(), reader.too_long().end());
  return records;
}

}  // namespace psformer
