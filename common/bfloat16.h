// bfloat16 <-> float32, for gradients and parameters on the wire (cluster.gradient_dtype and
// param_dtype = BF16). bf16 is the upper half of an fp32: widening is exact; narrowing rounds to
// nearest, ties to even, and keeps NaN a NaN. Loops over arrays are plain so the compiler
// vectorises them. The rounding of one value's bits is written once, for the host and for CUDA
// kernels alike (a GPU worker rounds its gradient on the device before it leaves), so both give
// the same bits.
#ifndef PSFORMER_COMMON_BFLOAT16_H_
#define PSFORMER_COMMON_BFLOAT16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define PSF_HOST_DEVICE __host__ __device__
#else
#define PSF_HOST_DEVICE
#endif

namespace psformer {

// The bf16 of the fp32 whose bits are `bits`.
PSF_HOST_DEVICE inline uint16_t Bf16OfFloatBits(uint32_t bits) {
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN stays NaN.
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return Bf16OfFloatBits(bits);
}

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// out[i] = bf16(in[i]) for n elements.
void FloatsToBf16(const float* in, size_t n, uint16_t* out);
// out[i] = float(in[i]); `in` may be unaligned (it points into a received frame).
void Bf16ToFloats(const void* in, size_t n, float* out);

}  // namespace psformer

#endif  // PSFORMER_COMMON_BFLOAT16_H_
