// The runtime half of common/thread_annotations.h (the compile-time half is
// scripts/check-thread-safety): a MutexLock holds its Mutex until Unlock or its end, and its
// waits sleep with the mutex released.
#include "common/thread_annotations.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace psformer {
namespace {

using namespace std::chrono_literals;

TEST(MutexLock, HoldsTheMutexUntilUnlockAndNotAfter) {
  Mutex mu;
  std::atomic<bool> trying{false}, got{false};
  {
    MutexLock lock(&mu);
    std::thread other([&] {
      trying = true;
      mu.Lock();  // blocks while the lock holds the mutex
      got = true;
      mu.Unlock();
    });
    while (!trying) std::this_thread::yield();
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(got) << "another thread took the mutex while a MutexLock held it";
    lock.Unlock();
    other.join();  // would never return if Unlock had not let go
    EXPECT_TRUE(got);
  }                      // the lock's end after Unlock must not unlock again
  MutexLock again(&mu);  // and the mutex is free once more
}

TEST(MutexLock, WaitSleepsWithTheMutexReleasedAndReturnsHoldingIt) {
  Mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    MutexLock lock(&mu);  // possible only while the waiter sleeps
    ready = true;
    cv.notify_all();
  });
  {
    MutexLock lock(&mu);
    while (!ready) lock.Wait(&cv);
    EXPECT_TRUE(ready);
  }
  setter.join();
}

TEST(MutexLock, TimedWaitsEndAtTheirLimitWhenNobodyNotifies) {
  Mutex mu;
  std::condition_variable cv;
  MutexLock lock(&mu);
  const auto start = std::chrono::steady_clock::now();
  // Spurious wakeups may end a wait early: loop until the limit says timeout.
  while (lock.WaitUntil(&cv, start + 30ms) != std::cv_status::timeout) {
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  EXPECT_EQ(lock.WaitFor(&cv, 1ms), std::cv_status::timeout);
}

}  // namespace
}  // namespace psformer
