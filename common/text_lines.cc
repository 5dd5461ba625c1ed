#include "common/text_lines.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/utf8.h"

namespace psformer {

StatusOr<std::vector<std::string>> ReadUtf8Lines(std::FILE* in, const std::string& name, CarriageReturn cr,
                                                 std::string_view hint) {
  std::vector<std::string> lines;
  std::string line;
  const auto where = [&] { return name + ":" + std::to_string(lines.size() + 1) + ": "; };
  const auto end_line = [&]() -> Status {
    if (cr == CarriageReturn::kDrop && !line.empty() && line.back() == '\r') line.pop_back();
    if (cr == CarriageReturn::kDrop && lines.empty() && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (size_t bad = 0; !IsValidUtf8(line, &bad)) {
      return Status::InvalidArgument(where() + "invalid UTF-8 at byte " + std::to_string(bad + 1) + " of the line" +
                                     std::string(hint));
    }
    lines.push_back(std::move(line));
    line.clear();
    return Status::Ok();
  };
  errno = 0;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), in)) > 0;) {
    for (size_t start = 0; start < n;) {
      const char* newline = static_cast<const char*>(std::memchr(buffer + start, '\n', n - start));
      const size_t stop = newline != nullptr ? static_cast<size_t>(newline - buffer) : n;
      if (line.size() + (stop - start) > kMaxTextLineBytes) {
        return Status::InvalidArgument(where() + "a line longer than " + std::to_string(kMaxTextLineBytes >> 20) +
                                       " MiB (a text of one sentence per line has none)");
      }
      line.append(buffer + start, stop - start);
      if (newline == nullptr) break;
      PSF_RETURN_IF_ERROR(end_line());
      start = stop + 1;
    }
  }
  // Reading a directory opens fine and fails here, with EISDIR.
  if (std::ferror(in)) {
    const int error = errno;
    return Status::IoError("cannot read " + name + (error != 0 ? std::string(": ") + std::strerror(error) : ""));
  }
  if (!line.empty()) PSF_RETURN_IF_ERROR(end_line());
  return lines;
}

StatusOr<std::vector<std::string>> ReadUtf8Lines(const std::string& path, CarriageReturn cr) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::IoError("cannot read " + path + ": it is a directory, not a file");
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) return Status::IoError("cannot read " + path + ": " + std::strerror(errno));
  return ReadUtf8Lines(file.get(), path, cr);
}

}  // namespace psformer
