#include "worker/translate/text_lines.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/utf8.h"

namespace psformer {

StatusOr<std::vector<std::string>> ReadTextLines(const std::string& path) {
  const auto io_error = [&path](int error) {
    return Status::IoError("cannot read " + path + ": " + std::strerror(error));
  };
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) return io_error(errno);
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) text.append(buffer, n);
  // Reading a directory opens fine and fails here, with EISDIR.
  if (std::ferror(file.get())) return io_error(errno);

  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t stop = text.find('\n', start);
    if (stop == std::string::npos) stop = text.size();
    lines.emplace_back(text, start, stop - start);
    start = stop + 1;
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    size_t offset = 0;
    if (!IsValidUtf8(lines[i], &offset)) {
      return Status::InvalidArgument(path + ":" + std::to_string(i + 1) + ": invalid UTF-8 at byte " +
                                     std::to_string(offset + 1) + " of the line");
    }
  }
  return lines;
}

}  // namespace psformer
