#include "worker/data/text_lines.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/utf8.h"

namespace psformer {

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
