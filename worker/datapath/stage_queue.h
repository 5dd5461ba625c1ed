// StageQueue<T>: the queue between two stages of the worker's data path (docs/architecture.md,
// "The worker's data path"). Producers Push and return at once; the consumer's Pop sleeps until
// an item or Close arrives (no polling: the waiting thread takes no core from the ones computing).
//
// Thread safety: any number of producers, one consumer; every member may be called from any thread.
#ifndef PSFORMER_WORKER_DATAPATH_STAGE_QUEUE_H_
#define PSFORMER_WORKER_DATAPATH_STAGE_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace psformer {

template <typename T>
class StageQueue {
 public:
  void Push(T item) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
  }
  // The oldest item, once there is one; nullopt once the queue is closed and empty.
  std::optional<T> Pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }
  // Pop ends with nullopt once the items pushed before are taken.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<T> items_;  // GUARDED_BY(mutex_)
  bool closed_ = false;  // GUARDED_BY(mutex_)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATAPATH_STAGE_QUEUE_H_
