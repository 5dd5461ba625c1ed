// Helpers for the CUDA backend's tests: the skip when no GPU is present, backends side by side,
// host<->device transfers and the error measure the tolerances refer to.
#ifndef PSFORMER_TESTS_CUDA_TEST_UTIL_H_
#define PSFORMER_TESTS_CUDA_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "tests/device_test_util.h"
#include "worker/backend/cpu_backend.h"
#include "worker/backend/cuda/cuda_backend.h"

// Skips the current test, with the reason, on a machine without a usable CUDA device.
#define PSF_SKIP_WITHOUT_GPU()                             \
  do {                                                     \
    if (::psformer::CudaDeviceCount() == 0) {              \
      GTEST_SKIP() << ::psformer::CudaUnavailableReason(); \
    }                                                      \
  } while (0)

namespace psformer::testing {

// max |a - b| / max |b|: the error relative to the reference's scale (elements that are zero in
// the reference do not make it blow up). 0 when both are all zero.
inline double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

inline std::vector<float> RandomFloats(std::mt19937_64& rng, size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// A CUDA backend on device 0 (strict fp32) and a one-thread CPU backend. REQUIRES: a GPU.
class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    PSF_SKIP_WITHOUT_GPU();
    auto created = CudaBackend::Create(CudaBackendOptions{});
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    gpu_ = std::move(created).value();
  }

  // The same host data on each backend.
  template <typename E>
  std::pair<DeviceBuffer<E>, DeviceBuffer<E>> Both(const std::vector<E>& host) {
    return {ToDevice(&cpu_, host), ToDevice(gpu_.get(), host)};
  }

  std::mt19937_64 rng_{20261122};
  CpuBackend<float> cpu_{1};
  std::unique_ptr<CudaBackend> gpu_;
};

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_CUDA_TEST_UTIL_H_
