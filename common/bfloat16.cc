#include "common/bfloat16.h"

namespace psformer {

void FloatsToBf16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

void Bf16ToFloats(const void* in, size_t n, float* out) {
  const auto* bytes = static_cast<const uint8_t*>(in);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    out[i] = Bf16ToFloat(h);
  }
}

}  // namespace psformer
