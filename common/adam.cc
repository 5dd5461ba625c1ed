#include "common/adam.h"

#include <cmath>

#include "common/parallel_for.h"

namespace psformer {

AdamStepConstants AdamConstants(const AdamHyper& hyper, int64_t step, double lr) {
  const double t = static_cast<double>(step);
  AdamStepConstants k;
  k.step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(hyper.beta1), t)));
  k.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(hyper.beta2), t)));
  k.b1 = hyper.beta1;
  k.b2 = hyper.beta2;
  k.eps = hyper.epsilon;
  k.c1 = 1.0f - k.b1;
  k.c2 = 1.0f - k.b2;
  return k;
}

namespace {

// AdamFused's loop for one combination of its options, so that each compiles to a straight
// vector loop (no per-element branch).
template <bool kNormalize, bool kOut>
void AdamLoop(const AdamStepConstants& constants, size_t n, const float* __restrict grad, float target_tokens,
              float* __restrict param, float* __restrict m, float* __restrict v, float* __restrict out) {
  // A local copy: stores through the arrays could otherwise change the constants, for all the
  // compiler knows, and it would reload them per element instead of vectorising.
  const AdamStepConstants k = constants;
  for (size_t i = 0; i < n; ++i) {
    const float g = kNormalize ? NormalizedGradient(grad[i], target_tokens) : grad[i];
    const float p = AdamElement(k, g, param[i], &m[i], &v[i]);
    param[i] = p;
    if constexpr (kOut) out[i] = p;
  }
}

}  // namespace

void AdamFused(const AdamStepConstants& k, size_t n, const float* grad, float target_tokens, float* param, float* m,
               float* v, float* out) {
  if (target_tokens > 0) {
    if (out != nullptr) return AdamLoop<true, true>(k, n, grad, target_tokens, param, m, v, out);
    return AdamLoop<true, false>(k, n, grad, target_tokens, param, m, v, out);
  }
  if (out != nullptr) return AdamLoop<false, true>(k, n, grad, target_tokens, param, m, v, out);
  AdamLoop<false, false>(k, n, grad, target_tokens, param, m, v, out);
}

void AdamUpdate(const AdamHyper& hyper, int64_t step, double lr, size_t n, const float* grad, float* param, float* m,
                float* v) {
  AdamFused(AdamConstants(hyper, step, lr), n, grad, 0.0f, param, m, v, nullptr);
}

void NormalizeGradient(size_t n, uint64_t target_tokens, float* grad) {
  const float tokens = static_cast<float>(target_tokens);
  for (size_t i = 0; i < n; ++i) grad[i] = NormalizedGradient(grad[i], tokens);
}

void AdamUpdateParallel(const AdamHyper& hyper, int64_t step, double lr, size_t n, const float* grad, float* param,
                        float* m, float* v, int threads) {
  ParallelFor(threads, n, 1 << 16, [&](int, size_t begin, size_t end) {
    AdamUpdate(hyper, step, lr, end - begin, grad + begin, param + begin, m + begin, v + begin);
  });
}

}  // namespace psformer
