// The record framing of TensorBoard's event files (the TFRecord format): each record is
//
//   uint64 length, little-endian
//   uint32 masked CRC-32C of those 8 bytes
//   length bytes of data (one serialized Event)
//   uint32 masked CRC-32C of the data
//
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, so that a CRC stored inside the data it
// covers does not checksum to a fixed value.
#ifndef PSFORMER_COMMON_TENSORBOARD_RECORD_FILE_H_
#define PSFORMER_COMMON_TENSORBOARD_RECORD_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace psformer::tensorboard {

uint32_t MaskedCrc32c(const void* data, size_t n);

// The framed bytes of one record.
std::string FrameRecord(const std::string& data);

// Every whole record of a file, in order. Reading stops, without an error, at the first record
// that is cut short or whose CRC does not match (the tail of a file whose writer was killed);
// `complete` (if given) says whether the whole file was read. IoError if the file cannot be read.
StatusOr<std::vector<std::string>> ReadRecords(const std::string& path, bool* complete = nullptr);

}  // namespace psformer::tensorboard

#endif  // PSFORMER_COMMON_TENSORBOARD_RECORD_FILE_H_
