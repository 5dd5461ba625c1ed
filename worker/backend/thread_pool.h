// A fixed set of threads that split a loop into contiguous ranges. Idle threads block on a
// condition variable instead of spinning: on a small shared machine, spinning threads (OpenMP's
// and OpenBLAS's defaults) steal the cores that the work itself needs and made training 50 times
// slower under load.
#ifndef PSFORMER_WORKER_BACKEND_THREAD_POOL_H_
#define PSFORMER_WORKER_BACKEND_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"

namespace psformer {

class ThreadPool {
 public:
  // threads: the number of ranges a loop is split into (the caller runs one of them). Throws
  // std::system_error when the machine refuses a thread, with none left running.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return parts_; }
  // Calls body(begin, end) on threads() contiguous ranges covering [0, n), the same ranges for
  // the same n, and returns when all are done. REQUIRES: not called from inside a body.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& body);

 private:
  void WorkerLoop(int index);
  // Ends and joins the workers.
  void Stop();

  const int parts_;  // set before any worker starts: workers read it
  std::vector<std::thread> workers_;
  Mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t, int64_t)>* body_ PSF_GUARDED_BY(mu_) = nullptr;
  int64_t n_ PSF_GUARDED_BY(mu_) = 0;
  uint64_t generation_ PSF_GUARDED_BY(mu_) = 0;
  int pending_ PSF_GUARDED_BY(mu_) = 0;
  bool stop_ PSF_GUARDED_BY(mu_) = false;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_THREAD_POOL_H_
