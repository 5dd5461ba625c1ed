// Lock discipline that the compiler checks: clang's thread safety analysis (-Wthread-safety) reads
// these annotations and refuses code that touches a member GUARDED_BY a mutex without holding it,
// calls a function that REQUIRES a mutex without it, or returns with a mutex still held.
// scripts/check-thread-safety (the CTest `check_thread_safety`) compiles every file that includes
// this header with clang and the analysis on, as errors. Other compilers see no annotations.
//
//   Mutex mutex_;
//   std::condition_variable cv_;
//   std::deque<Item> items_ PSF_GUARDED_BY(mutex_);
//   ...
//   MutexLock lock(&mutex_);
//   while (items_.empty()) lock.Wait(&cv_);  // the condition read with the mutex held
//
// Waits are written as loops around Wait rather than with a predicate lambda: the analysis does
// not know that a lambda runs with the mutex held, and a loop says the same.
#ifndef PSFORMER_COMMON_THREAD_ANNOTATIONS_H_
#define PSFORMER_COMMON_THREAD_ANNOTATIONS_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define PSF_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PSF_THREAD_ANNOTATION(x)
#endif

#define PSF_CAPABILITY(name) PSF_THREAD_ANNOTATION(capability(name))
#define PSF_SCOPED_CAPABILITY PSF_THREAD_ANNOTATION(scoped_lockable)
#define PSF_GUARDED_BY(mu) PSF_THREAD_ANNOTATION(guarded_by(mu))
#define PSF_PT_GUARDED_BY(mu) PSF_THREAD_ANNOTATION(pt_guarded_by(mu))
#define PSF_REQUIRES(...) PSF_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define PSF_ACQUIRE(...) PSF_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define PSF_RELEASE(...) PSF_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define PSF_EXCLUDES(...) PSF_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

namespace psformer {

// A std::mutex the analysis can follow (libstdc++'s carries no annotations).
class PSF_CAPABILITY("mutex") Mutex {
 public:
  void Lock() PSF_ACQUIRE() { mu_.lock(); }
  void Unlock() PSF_RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction, or to Unlock. Wait, WaitFor and WaitUntil
// sleep on a condition variable with the mutex released and return holding it again.
class PSF_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) PSF_ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() PSF_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets go of the mutex before the scope ends (it is not taken again).
  void Unlock() PSF_RELEASE() { lock_.unlock(); }

  void Wait(std::condition_variable* cv) { cv->wait(lock_); }
  template <typename Rep, typename Period>
  std::cv_status WaitFor(std::condition_variable* cv, std::chrono::duration<Rep, Period> limit) {
    return cv->wait_for(lock_, limit);
  }
  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(std::condition_variable* cv, std::chrono::time_point<Clock, Duration> deadline) {
    return cv->wait_until(lock_, deadline);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_THREAD_ANNOTATIONS_H_
