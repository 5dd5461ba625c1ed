#include "common/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace psformer {
namespace {

// Adam written out in double precision, straight from Kingma & Ba's Algorithm 1 with the
// epsilon placed as PyTorch does (after the bias-corrected square root).
void ReferenceAdam(const AdamHyper& h, int64_t t, double lr, const std::vector<double>& g, std::vector<double>* p,
                   std::vector<double>* m, std::vector<double>* v) {
  for (size_t i = 0; i < g.size(); ++i) {
    (*m)[i] = h.beta1 * (*m)[i] + (1 - h.beta1) * g[i];
    (*v)[i] = h.beta2 * (*v)[i] + (1 - h.beta2) * g[i] * g[i];
    const double mhat = (*m)[i] / (1 - std::pow(h.beta1, t));
    const double vhat = (*v)[i] / (1 - std::pow(h.beta2, t));
    (*p)[i] -= lr * mhat / (std::sqrt(vhat) + h.epsilon);
  }
}

TEST(Adam, MatchesADoublePrecisionReferenceOverManySteps) {
  AdamHyper hyper;
  hyper.epsilon = 1e-8f;
  const size_t n = 1000;
  std::mt19937 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> p(n), m(n, 0), v(n, 0);
  std::vector<double> pr(n), mr(n, 0), vr(n, 0);
  for (size_t i = 0; i < n; ++i) pr[i] = p[i] = static_cast<float>(normal(rng));
  for (int t = 1; t <= 50; ++t) {
    std::vector<float> g(n);
    std::vector<double> gr(n);
    for (size_t i = 0; i < n; ++i) gr[i] = g[i] = static_cast<float>(normal(rng) * 0.1);
    AdamUpdate(hyper, t, 1e-3, n, g.data(), p.data(), m.data(), v.data());
    ReferenceAdam(hyper, t, 1e-3, gr, &pr, &mr, &vr);
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pr[i], 2e-6) << i;
}

TEST(Adam, ParallelSplitIsBitwiseIdentical) {
  AdamHyper hyper;
  const size_t n = 300001;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> g(n), p1(n), m1(n, 0), v1(n, 0);
  for (size_t i = 0; i < n; ++i) {
    g[i] = u(rng);
    p1[i] = u(rng);
  }
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  for (int t = 1; t <= 3; ++t) {
    AdamUpdate(hyper, t, 7e-4, n, g.data(), p1.data(), m1.data(), v1.data());
    AdamUpdateParallel(hyper, t, 7e-4, n, g.data(), p2.data(), m2.data(), v2.data(), 3);
  }
  EXPECT_EQ(0, std::memcmp(p1.data(), p2.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(v1.data(), v2.data(), n * sizeof(float)));
}

// The vectorised loop against AdamElement called one element at a time (the loop before it
// was vectorised): bitwise equal for every option, over a length no vector width divides.
TEST(Adam, FusedLoopIsBitwiseTheElementLoop) {
  const AdamStepConstants k = AdamConstants(AdamHyper{}, 7, 3e-4);
  const size_t n = 1037;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> g(n), p(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = u(rng) * 100;
    p[i] = u(rng);
    m[i] = u(rng) * 0.1f;
    v[i] = std::abs(u(rng)) * 0.01f;
  }
  for (const float tokens : {0.0f, 2519.0f}) {
    for (const bool with_out : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tokens " << tokens << " out " << with_out);
      std::vector<float> pe = p, me = m, ve = v, pf = p, mf = m, vf = v, out(n, -1.0f);
      for (size_t i = 0; i < n; ++i) {
        const float gi = tokens > 0 ? NormalizedGradient(g[i], tokens) : g[i];
        pe[i] = AdamElement(k, gi, pe[i], &me[i], &ve[i]);
      }
      volatile size_t count = n;  // not a compile-time constant: the loop the servers run
      AdamFused(k, count, g.data(), tokens, pf.data(), mf.data(), vf.data(), with_out ? out.data() : nullptr);
      EXPECT_EQ(0, std::memcmp(pe.data(), pf.data(), n * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(me.data(), mf.data(), n * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(ve.data(), vf.data(), n * sizeof(float)));
      if (with_out) {
        EXPECT_EQ(0, std::memcmp(pe.data(), out.data(), n * sizeof(float)));
      } else {
        EXPECT_EQ(out, std::vector<float>(n, -1.0f));
      }
    }
  }
}

}  // namespace
}  // namespace psformer
