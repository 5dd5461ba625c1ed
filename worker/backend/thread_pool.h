// A fixed set of threads that split a loop into contiguous ranges. Idle threads block on a
// condition variable instead of spinning: on a small shared machine, spinning threads (OpenMP's
// and OpenBLAS's defaults) steal the cores that the work itself needs and made training 50 times
// slower under load.
#ifndef PSFORMER_WORKER_BACKEND_THREAD_POOL_H_
#define PSFORMER_WORKER_BACKEND_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;  // GUARDED_BY(mu_)
  int64_t n_ = 0;                                                // GUARDED_BY(mu_)
  uint64_t generation_ = 0;                                      // GUARDED_BY(mu_)
  int pending_ = 0;                                              // GUARDED_BY(mu_)
  bool stop_ = false;                                            // GUARDED_BY(mu_)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_THREAD_POOL_H_
