// SHA-256 (FIPS 180-4), for `psformer checksum`: a digest of a model's parameter bytes that two
// runs can compare to prove they ended with identical weights.
#ifndef PSFORMER_COMMON_SHA256_H_
#define PSFORMER_COMMON_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace psformer {

class Sha256 {
 public:
  Sha256();
  // Feeds n more bytes; Update(a); Update(b) equals Update(a + b).
  void Update(const void* data, size_t n);
  // The digest of everything fed. The object must not be updated afterwards.
  std::array<uint8_t, 32> Finish();

 private:
  void Compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Lower-case hex of SHA-256(data).
std::string Sha256Hex(const void* data, size_t n);
std::string ToHex(const uint8_t* bytes, size_t n);

}  // namespace psformer

#endif  // PSFORMER_COMMON_SHA256_H_
