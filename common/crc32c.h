// CRC-32C (Castagnoli), for payload and checkpoint checksums. Uses the SSE4.2 instruction
// where the CPU has it, a table otherwise; both give the same value.
#ifndef PSFORMER_COMMON_CRC32C_H_
#define PSFORMER_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace psformer {

// Extends `crc` (0 to start) over n bytes: Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace psformer

#endif  // PSFORMER_COMMON_CRC32C_H_
