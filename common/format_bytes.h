// A byte count as a person reads it, for messages: "845 bytes", "2.9 KiB", "512 MiB".
#ifndef PSFORMER_COMMON_FORMAT_BYTES_H_
#define PSFORMER_COMMON_FORMAT_BYTES_H_

#include <cstdint>
#include <string>

namespace psformer {

// "1.5 GiB", "512 MiB", "3.2 TiB": bytes as a person reads them.
std::string FormatBytes(uint64_t bytes);

}  // namespace psformer

#endif  // PSFORMER_COMMON_FORMAT_BYTES_H_
