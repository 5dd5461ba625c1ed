#include "common/adam.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace psformer {

void AdamUpdate(const AdamHyper& hyper, int64_t step, double lr, size_t n, const float* grad, float* param,
                float* m, float* v) {
  const double t = static_cast<double>(step);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(hyper.beta1), t)));
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(hyper.beta2), t)));
  const float b1 = hyper.beta1, b2 = hyper.beta2, eps = hyper.epsilon;
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  // Written so the compiler vectorises it; no reductions, so no order effects.
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float mi = b1 * m[i] + c1 * g;
    const float vi = b2 * v[i] + c2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    param[i] -= step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

void NormalizeGradient(size_t n, uint64_t target_tokens, float* grad) {
  const float tokens = static_cast<float>(target_tokens);
  for (size_t i = 0; i < n; ++i) grad[i] = grad[i] / tokens;
}

void AdamUpdateParallel(const AdamHyper& hyper, int64_t step, double lr, size_t n, const float* grad,
                        float* param, float* m, float* v, int threads) {
  if (threads <= 1 || n < (1u << 16)) {
    AdamUpdate(hyper, step, lr, n, grad, param, m, v);
    return;
  }
  std::vector<std::thread> pool;
  const size_t chunk = (n + threads - 1) / threads;
  for (int k = 0; k < threads; ++k) {
    const size_t begin = k * chunk;
    if (begin >= n) break;
    const size_t len = std::min(chunk, n - begin);
    pool.emplace_back([=] { AdamUpdate(hyper, step, lr, len, grad + begin, param + begin, m + begin, v + begin); });
  }
  for (auto& th : pool) th.join();
}

}  // namespace psformer
