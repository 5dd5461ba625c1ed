// Initial values of the flat parameter vector (common/param_layout.h says which ParamInit each
// tensor takes). Every element is a pure function of (seed, element index), drawn from Philox
// (common/philox.h) with key = seed and counter = (index low 32 bits, index high 32 bits,
// kParamInitStream, kParamInitWord3), so parameter servers can initialise their own shards independently and
// the union equals initialising the whole vector in one piece.
//   kXavierUniform:   a * (2u - 1), a = sqrt(6 / (rows + cols)), u = uniform(word 0)
//   kEmbeddingNormal: d_model^-0.5 * Box-Muller(uniform(word 0), uniform(word 1))
//   kZeros, kOnes:    0, 1
#ifndef PSFORMER_COMMON_PARAM_INIT_H_
#define PSFORMER_COMMON_PARAM_INIT_H_

#include <cstdint>

#include "common/param_layout.h"

namespace psformer {

// Counter words 2 and 3 of the initialisation stream. Dropout counters hold (step, worker) there
// (common/philox.h) and no worker has index 0xFFFFFFFF, so the two never share a counter.
constexpr uint32_t kParamInitStream = 0x1A17u;
constexpr uint32_t kParamInitWord3 = 0xFFFFFFFFu;

// Fills out[0 .. end-begin) with elements [begin, end) of the initial parameter vector.
// REQUIRES: begin <= end <= layout.total_size().
void InitParamRange(const ParamLayout& layout, uint64_t seed, uint64_t begin, uint64_t end, float* out);

}  // namespace psformer

#endif  // PSFORMER_COMMON_PARAM_INIT_H_
