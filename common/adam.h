// Adam (Kingma & Ba, 2015) over a range of the flat parameter vector, with bias correction,
// in the form PyTorch's torch.optim.Adam computes:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Both the local trainer and the parameter servers call this, so they agree bit for bit.
// Elementwise: any split of a range across threads gives identical results.
#ifndef PSFORMER_COMMON_ADAM_H_
#define PSFORMER_COMMON_ADAM_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace psformer {

struct AdamHyper {
  float beta1 = 0.9f;
  float beta2 = 0.98f;
  float epsilon = 1e-9f;
};

// The per-update constants of step `step` (1-based) with learning rate `lr`.
struct AdamStepConstants {
  float step_size;     // lr / (1 - b1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - b2^t)
  float b1, b2, c1, c2, eps;
};
AdamStepConstants AdamConstants(const AdamHyper& hyper, int64_t step, double lr);

// One element of the update: m and v in place, the new parameter returned. Every Adam loop
// (AdamUpdate, the servers' fused pass) goes through this, so they agree bit for bit; inline
// so that those loops vectorise. No reductions, so no order effects.
inline float AdamElement(const AdamStepConstants& k, float g, float param, float* m, float* v) {
  const float mi = k.b1 * *m + k.c1 * g;
  const float vi = k.b2 * *v + k.c2 * (g * g);
  *m = mi;
  *v = vi;
  return param - k.step_size * mi / (std::sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
}

// One update of n elements, fused for the servers' pass: the gradient (divided by target_tokens
// first when that is > 0, exactly as NormalizeGradient), then Adam on param, m and v in place,
// the new parameters also written to `out` unless it is null. No two arrays may overlap: the
// loop is compiled with that promise (restrict) so that it vectorises, and each element still
// goes through AdamElement, so the result is bitwise the scalar loop's.
void AdamFused(const AdamStepConstants& k, size_t n, const float* grad, float target_tokens, float* param, float* m,
               float* v, float* out);

// Applies step `step` (1-based) with learning rate `lr` to n elements.
// `grad` is the already normalised gradient (divided by the step's target tokens).
void AdamUpdate(const AdamHyper& hyper, int64_t step, double lr, size_t n, const float* grad, float* param, float* m,
                float* v);

// The same, split over `threads` threads (1 = the calling thread only).
void AdamUpdateParallel(const AdamHyper& hyper, int64_t step, double lr, size_t n, const float* grad, float* param,
                        float* m, float* v, int threads);

// Turns a gradient summed over a step's tokens into the mean: g[i] = g[i] / target_tokens.
// The local trainer and the servers both call this, after summing workers' gradients in worker
// order, so one worker equals W workers holding the union batch (up to summation order).
void NormalizeGradient(size_t n, uint64_t target_tokens, float* grad);
// One element of NormalizeGradient, for loops that fuse it with the update.
inline float NormalizedGradient(float g, float target_tokens) { return g / target_tokens; }

}  // namespace psformer

#endif  // PSFORMER_COMMON_ADAM_H_
