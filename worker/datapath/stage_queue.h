// StageQueue<T>: the queue between two stages of the worker's data path (docs/architecture.md,
// "The worker's data path"). Producers Push and return at once; the consumer's Pop sleeps until
// an item or Close arrives (no polling: the waiting thread takes no core from the ones computing).
//
// Thread safety: any number of producers, one consumer; every member may be called from any thread.
#ifndef PSFORMER_WORKER_DATAPATH_STAGE_QUEUE_H_
#define PSFORMER_WORKER_DATAPATH_STAGE_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <optional>
#include <utility>

#include "common/thread_annotations.h"

namespace psformer {

template <typename T>
class StageQueue {
 public:
  void Push(T item) {
    {
      MutexLock lock(&mutex_);
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
  }
  // The oldest item, once there is one; nullopt once the queue is closed and empty.
  std::optional<T> Pop() {
    MutexLock lock(&mutex_);
    while (items_.empty() && !closed_) lock.Wait(&cv_);
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }
  // Pop ends with nullopt once the items pushed before are taken.
  void Close() {
    {
      MutexLock lock(&mutex_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  Mutex mutex_;
  std::condition_variable cv_;
  std::deque<T> items_ PSF_GUARDED_BY(mutex_);
  bool closed_ PSF_GUARDED_BY(mutex_) = false;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATAPATH_STAGE_QUEUE_H_
