// The one codec of psformer's binary files (model.bin, the local trainer's state, checkpoint
// shards): each begins with an 8-byte magic number and a version, holds fixed-width
// little-endian fields and arrays, and ends with the CRC-32C of everything before it. A format
// says which fields in which order, and what to call a file that fails; the bytes are this
// codec's alone.
//
//   BinaryWriter w(StringSink(&bytes), kMagic, kVersion);  // or a file's sink (shard_file.cc)
//   w.Put(step); w.PutString(config); w.PutArray(params.data(), params.size());
//   PSF_RETURN_IF_ERROR(w.Finish());                       // appends the CRC
//
//   BinaryReader r(bytes);
//   if (!r.HasMagic(kMagic)) ...; r.Get(&version); ...; if (!r.ChecksumMatches()) ...
#ifndef PSFORMER_COMMON_BINARY_CODEC_H_
#define PSFORMER_COMMON_BINARY_CODEC_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace psformer {

static_assert(std::endian::native == std::endian::little, "psformer's binary files are little-endian");

inline constexpr size_t kMagicBytes = 8;

// Where a writer's bytes go; a failure is reported once, by Finish.
using BinarySink = std::function<Status(const void* data, size_t n)>;
// A sink appending to *out.
BinarySink StringSink(std::string* out);

class BinaryWriter {
 public:
  // Writes `magic` (kMagicBytes) and `version` first.
  BinaryWriter(BinarySink sink, std::string_view magic, uint32_t version);

  // A fixed-width field (an integer or a float), as it lies in memory.
  template <typename T>
  void Put(T value) {
    static_assert(std::is_arithmetic_v<T>);
    PutBytes(&value, sizeof(value));
  }
  // A string: its length (uint32) and its bytes.
  void PutString(const std::string& s);
  // n elements, without a count (the format writes the count where it belongs).
  template <typename T>
  void PutArray(const T* data, size_t n) {
    static_assert(std::is_arithmetic_v<T>);
    PutBytes(data, n * sizeof(T));
  }
  void PutBytes(const void* data, size_t n);

  // Appends the CRC-32C of everything written; returns the first failure of the sink, if any.
  Status Finish();

 private:
  BinarySink sink_;
  uint32_t crc_ = 0;
  Status status_;
};

// Reads what a BinaryWriter wrote, never past the end of `bytes` (which it borrows).
class BinaryReader {
 public:
  explicit BinaryReader(const std::string& bytes) : bytes_(bytes) {}

  // Whether the file begins with `magic` (consumed when it does).
  bool HasMagic(std::string_view magic);
  // Each returns false, reading nothing, when too few bytes are left.
  template <typename T>
  bool Get(T* out) {
    static_assert(std::is_arithmetic_v<T>);
    return GetBytes(out, sizeof(T));
  }
  bool GetString(std::string* out);
  template <typename T>
  bool GetArray(T* out, size_t n) {
    static_assert(std::is_arithmetic_v<T>);
    return n <= remaining() / sizeof(T) && GetBytes(out, n * sizeof(T));
  }
  bool GetBytes(void* out, size_t n);

  // Bytes left before the CRC (0 when the file is too short to hold one).
  size_t remaining() const { return bytes_.size() - at_ >= 4 ? bytes_.size() - at_ - 4 : 0; }
  size_t position() const { return at_; }
  // Whether the file's last four bytes are the CRC-32C of the rest.
  bool ChecksumMatches() const;

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_BINARY_CODEC_H_
