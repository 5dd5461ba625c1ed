#include "export/safetensors_file.h"

#include <bit>
#include <cstring>
#include <functional>
#include <numeric>

#include "common/json_text.h"
#include "common/logging.h"

namespace psformer {

// The raw tensor bytes are the host's floats copied as they are.
static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian tensors");

std::string SerializeSafetensors(const std::vector<NamedTensor>& tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    const int64_t elements = std::accumulate(t.shape.begin(), t.shape.end(), int64_t{1}, std::multiplies<>());
    PSF_CHECK(static_cast<uint64_t>(elements) == t.values.size());
    std::string shape;
    for (int64_t dim : t.shape) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(dim);
    }
    const uint64_t end = offset + t.values.size() * sizeof(float);
    // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) on one long chain of + here.
    header += ',';
    header += JsonQuote(t.name);
    header += ":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[";
    header += std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string bytes(sizeof(uint64_t), '\0');
  const uint64_t header_size = header.size();
  std::memcpy(bytes.data(), &header_size, sizeof(header_size));
  bytes.reserve(bytes.size() + header.size() + offset);
  bytes += header;
  for (const NamedTensor& t : tensors) {
    bytes.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
  }
  return bytes;
}

}  // namespace psformer
