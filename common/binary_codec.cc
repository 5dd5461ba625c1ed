#include "common/binary_codec.h"

#include <utility>

#include "common/crc32c.h"
#include "common/logging.h"

namespace psformer {

BinarySink StringSink(std::string* out) {
  return [out](const void* data, size_t n) {
    out->append(static_cast<const char*>(data), n);
    return Status::Ok();
  };
}

BinaryWriter::BinaryWriter(BinarySink sink, std::string_view magic, uint32_t version) : sink_(std::move(sink)) {
  PSF_CHECK(magic.size() == kMagicBytes);
  PutBytes(magic.data(), magic.size());
  Put(version);
}

void BinaryWriter::PutString(const std::string& s) {
  Put(static_cast<uint32_t>(s.size()));
  PutBytes(s.data(), s.size());
}

void BinaryWriter::PutBytes(const void* data, size_t n) {
  if (!status_.ok()) return;
  crc_ = Crc32c(crc_, data, n);
  status_ = sink_(data, n);
}

Status BinaryWriter::Finish() {
  const uint32_t crc = crc_;
  PutBytes(&crc, sizeof(crc));
  return status_;
}

bool BinaryReader::HasMagic(std::string_view magic) {
  if (bytes_.size() - at_ < magic.size() || bytes_.compare(at_, magic.size(), magic) != 0) return false;
  at_ += magic.size();
  return true;
}

bool BinaryReader::GetString(std::string* out) {
  uint32_t size = 0;
  const size_t start = at_;
  if (!Get(&size) || size > remaining()) {
    at_ = start;
    return false;
  }
  out->assign(bytes_.data() + at_, size);
  at_ += size;
  return true;
}

bool BinaryReader::GetBytes(void* out, size_t n) {
  if (n > remaining()) return false;
  std::memcpy(out, bytes_.data() + at_, n);
  at_ += n;
  return true;
}

bool BinaryReader::ChecksumMatches() const {
  if (bytes_.size() < sizeof(uint32_t)) return false;
  uint32_t stored = 0;
  std::memcpy(&stored, bytes_.data() + bytes_.size() - sizeof(stored), sizeof(stored));
  return Crc32c(0, bytes_.data(), bytes_.size() - sizeof(stored)) == stored;
}

}  // namespace psformer
