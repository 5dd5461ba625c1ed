// Receiving in transport tests (tests/transport_test.cc, tests/shm_van_test.cc, send_window_test.cc, ...).
#ifndef PSFORMER_TESTS_VAN_TEST_UTIL_H_
#define PSFORMER_TESTS_VAN_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
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

// Calls Recv on `van` from a thread of its own (what a role's loop does) until stopped, so that
// what it holds back goes out as the link takes it; whatever it receives is dropped.
class Pump {
 public:
  explicit Pump(Van& van)
      : thread_([this, &van] {
          while (!stop_.load()) EXPECT_TRUE(van.Recv(2).ok());
        }) {}
  ~Pump() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_VAN_TEST_UTIL_H_
