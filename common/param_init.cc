#include "common/param_init.h"

#include <algorithm>
#include <cmath>

#include "common/logging.h"
#include "common/philox.h"

namespace psformer {
namespace {

PhiloxCounter Draw(uint64_t seed, uint64_t index) {
  return Philox4x32_10(PhiloxCounter{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                                      kParamInitStream, kParamInitWord3}},
                       PhiloxKey{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}});
}

// Uniform in (0, 1] with 32 random bits, so that log() below is finite.
double UniformOpen(uint32_t word) { return (static_cast<double>(word) + 1.0) / 4294967296.0; }

}  // namespace

void InitParamRange(const ParamLayout& layout, uint64_t seed, uint64_t begin, uint64_t end, float* out) {
  PSF_CHECK(begin <= end && end <= layout.total_size());
  for (const ParamTensor& t : layout.tensors()) {
    const uint64_t lo = std::max(begin, t.offset);
    const uint64_t hi = std::min(end, t.offset + t.size());
    if (lo >= hi) continue;
    float* dst = out + (lo - begin);
    const uint64_t n = hi - lo;
    switch (t.init) {
      case ParamInit::kZeros:
        std::fill(dst, dst + n, 0.0f);
        break;
      case ParamInit::kOnes:
        std::fill(dst, dst + n, 1.0f);
        break;
      case ParamInit::kXavierUniform: {
        const double a = std::sqrt(6.0 / static_cast<double>(t.rows + t.cols));
        for (uint64_t i = 0; i < n; ++i) {
          const double u = PhiloxUniform(Draw(seed, lo + i).v[0]);
          dst[i] = static_cast<float>(a * (2.0 * u - 1.0));
        }
        break;
      }
      case ParamInit::kEmbeddingNormal: {
        const double stddev = 1.0 / std::sqrt(static_cast<double>(t.cols));
        for (uint64_t i = 0; i < n; ++i) {
          const PhiloxCounter w = Draw(seed, lo + i);
          const double normal = std::sqrt(-2.0 * std::log(UniformOpen(w.v[0]))) *
                                std::cos(2.0 * 3.14159265358979323846 * UniformOpen(w.v[1]));
          dst[i] = static_cast<float>(stddev * normal);
        }
        break;
      }
    }
  }
}

}  // namespace psformer
