#include "common/tensorboard/record_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/crc32c.h"

namespace psformer::tensorboard {
namespace {

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t LoadLittleEndian(const char* p, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return value;
}

}  // namespace

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(0, data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string FrameRecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(data.size(), 8, &out);
  AppendLittleEndian(MaskedCrc32c(out.data(), 8), 4, &out);
  out += data;
  AppendLittleEndian(MaskedCrc32c(data.data(), data.size()), 4, &out);
  return out;
}

StatusOr<std::vector<std::string>> ReadRecords(const std::string& path, bool* complete) {
  // A directory opens as a stream but throws on reading.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::IoError("cannot read " + path + ": a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError("cannot open " + path + ": " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::IoError("cannot read " + path);
  std::vector<std::string> records;
  size_t pos = 0;
  while (bytes.size() - pos >= 12) {
    const char* header = bytes.data() + pos;
    if (LoadLittleEndian(header + 8, 4) != MaskedCrc32c(header, 8)) break;
    const uint64_t length = LoadLittleEndian(header, 8);
    if (length > bytes.size() - pos - 12 || bytes.size() - pos - 12 - length < 4) break;
    const char* data = header + 12;
    if (LoadLittleEndian(data + length, 4) != MaskedCrc32c(data, length)) break;
    records.emplace_back(data, length);
    pos += 12 + length + 4;
  }
  if (complete != nullptr) *complete = pos == bytes.size();
  return records;
}

}  // namespace psformer::tensorboard
