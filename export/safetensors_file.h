// The safetensors file format, which Hugging Face libraries load models from: an 8-byte
// little-endian header length n, n bytes of JSON header, then the tensors' raw bytes. The header
// maps each tensor's name to {"dtype", "shape", "data_offsets": [begin, end)} (offsets into the
// bytes after the header, which the tensors fill contiguously in order), plus "__metadata__".
// psformer writes fp32 tensors only.
#ifndef PSFORMER_EXPORT_SAFETENSORS_FILE_H_
#define PSFORMER_EXPORT_SAFETENSORS_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace psformer {

struct NamedTensor {
  std::string name;            // e.g. "model.encoder.layers.0.fc1.weight"
  std::vector<int64_t> shape;  // row-major, outermost first
  std::vector<float> values;   // product of shape elements
};

// The bytes of a safetensors file holding `tensors` in the given order, with
// "__metadata__": {"format": "pt"} (transformers asks for it). The header is padded with spaces
// to a multiple of 8 bytes, so every tensor starts aligned.
// REQUIRES: names unique, values.size() equal to the product of each shape.
std::string SerializeSafetensors(const std::vector<NamedTensor>& tensors);

}  // namespace psformer

#endif  // PSFORMER_EXPORT_SAFETENSORS_FILE_H_
