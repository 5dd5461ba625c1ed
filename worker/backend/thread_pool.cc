#include "worker/backend/thread_pool.h"

namespace psformer {

ThreadPool::ThreadPool(int threads) : parts_(threads < 1 ? 1 : threads) {
  try {
    for (int i = 1; i < parts_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
  } catch (...) {
    // The machine refused a thread (std::system_error): the ones started must be joined, or
    // destroying them ends the process with std::terminate instead of the error.
    Stop();
    throw;
  }
}

ThreadPool::~ThreadPool() { Stop(); }

void ThreadPool::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  const int parts = threads();
  if (parts == 1 || n < parts) {
    body(0, n);
    return;
  }
  {
    MutexLock lock(&mu_);
    body_ = &body;
    n_ = n;
    pending_ = parts - 1;
    ++generation_;
  }
  start_.notify_all();
  body(0, n / parts);
  MutexLock lock(&mu_);
  while (pending_ != 0) lock.Wait(&done_);
  body_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  const int parts = parts_;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* body;
    int64_t n;
    {
      MutexLock lock(&mu_);
      while (!stop_ && generation_ == seen) lock.Wait(&start_);
      if (stop_) return;
      seen = generation_;
      body = body_;
      n = n_;
    }
    (*body)(n * index / parts, n * (index + 1) / parts);
    {
      MutexLock lock(&mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace psformer
