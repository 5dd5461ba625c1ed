// Receiving in transport tests (tests/transport_test.cc, tests/shm_van_test.cc).
#ifndef PSFORMER_TESTS_VAN_TEST_UTIL_H_
#define PSFORMER_TESTS_VAN_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <utility>

#include "common/transport/van.h"

namespace psformer::testing {

// The next message `van` receives, waiting at most 10 s (a test failure, and an empty message,
// if none comes).
inline RawMessage RecvOne(Van& van) {
  for (int i = 0; i < 100; ++i) {
    auto r = van.Recv(100);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok() && r->has_value()) return std::move(**r);
  }
  ADD_FAILURE() << "no message within 10 s";
  return {};
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_VAN_TEST_UTIL_H_
