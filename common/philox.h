// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a counter-based generator. Output = a pure function of (counter, key), so any
// element of a random stream can be computed on its own, in any order, on CPU or GPU, and every
// backend draws the same numbers. Header-only; the functions compile for CUDA device code too.
//
// Dropout masks (docs/determinism.md). A mask element is keyed by:
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (element / 4, tensor id, step, worker)
// and the element takes word (element % 4) of the Philox output. `tensor` numbers the dropout
// sites of the model (worker/model/dropout_sites.h); `step` is the 1-based training step (low 32
// bits); `element` is the row-major index in the tensor, below 2^34. A word w becomes the uniform
// u = (w >> 8) * 2^-24 in [0, 1); the element is kept when u >= p and then scaled by 1 / (1 - p).
#ifndef PSFORMER_COMMON_PHILOX_H_
#define PSFORMER_COMMON_PHILOX_H_

#include <cstdint>

#if defined(__CUDACC__)
#define PSF_HOST_DEVICE __host__ __device__
#else
#define PSF_HOST_DEVICE
#endif

namespace psformer {

struct PhiloxCounter {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t v[2];
};

namespace philox_internal {
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

PSF_HOST_DEVICE inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

PSF_HOST_DEVICE inline PhiloxCounter Round(const PhiloxCounter& c, const PhiloxKey& k) {
  uint32_t hi0, lo0, hi1, lo1;
  MulHiLo(kMul0, c.v[0], &hi0, &lo0);
  MulHiLo(kMul1, c.v[2], &hi1, &lo1);
  return PhiloxCounter{{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
}
}  // namespace philox_internal

// The 4 random words for (counter, key), ten rounds.
PSF_HOST_DEVICE inline PhiloxCounter Philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key.v[0] += philox_internal::kWeyl0;
      key.v[1] += philox_internal::kWeyl1;
    }
    counter = philox_internal::Round(counter, key);
  }
  return counter;
}

// A word as a uniform float in [0, 1) with 24 random bits (exact in fp32).
PSF_HOST_DEVICE inline float PhiloxUniform(uint32_t word) {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

// What identifies one dropout mask (see the header comment).
struct DropoutKey {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t worker = 0;
};

// Whether element `element` of dropout site `tensor` is kept, with drop probability p.
PSF_HOST_DEVICE inline bool DropoutKeep(const DropoutKey& key, uint32_t tensor, uint64_t element, float p) {
  const PhiloxCounter out =
      Philox4x32_10(PhiloxCounter{{static_cast<uint32_t>(element >> 2), tensor, key.step, key.worker}},
                    PhiloxKey{{static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32)}});
  return PhiloxUniform(out.v[element & 3]) >= p;
}

}  // namespace psformer

#endif  // PSFORMER_COMMON_PHILOX_H_
