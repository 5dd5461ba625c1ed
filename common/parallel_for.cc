#include "common/parallel_for.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <thread>

#include "common/thread_annotations.h"

namespace psformer {
namespace {

// Grains per piece, so that `pieces` pieces cover n elements.
size_t GrainsPerPiece(size_t n, size_t grain, int pieces) {
  const size_t grains = (n + grain - 1) / grain;
  return (grains + pieces - 1) / pieces;
}

// The threads ParallelFor's pieces run on, made once and kept: a worker's data path checksums and
// copies every piece of every push and pull with ParallelFor, a hundred calls a step, and making
// and joining a dozen threads for each cost milliseconds a step. Idle helpers sleep on a
// condition variable (spinning ones steal the cores the work needs).
//
// A call's pieces are claimed one at a time from a counter, by the caller and by helpers alike:
// the caller claims until none is left, then waits for the pieces helpers are still running. So
// every call completes even when all helpers are busy with other calls (or none exists), and a
// body may itself call ParallelFor.
//
// One pool per process, made on first use and never destroyed: its threads sleep until the
// process ends (destroying it at exit would race with callers on other threads).
class HelperPool {
 public:
  static HelperPool& Get() {
    static HelperPool* pool = new HelperPool();  // NOLINT: deliberately never destroyed (above).
    return *pool;
  }

  void Run(int pieces, const std::function<void(int)>& body) {
    auto call = std::make_shared<Call>();
    call->pieces = pieces;
    call->body = &body;
    {
      MutexLock lock(&mutex_);
      while (static_cast<int>(helpers_) < std::min(pieces - 1, kMaxHelpers)) {
        std::thread([this] { Loop(); }).detach();
        ++helpers_;
      }
      calls_.push_back(call);
    }
    work_cv_.notify_all();
    Work(*call);
    MutexLock lock(&call->mutex);
    while (call->finished != call->pieces) lock.Wait(&call->done_cv);
  }

 private:
  // Helpers beyond this run nothing a caller could not: more pieces than this wait their turn.
  static constexpr int kMaxHelpers = 256;

  struct Call {
    int pieces = 0;
    const std::function<void(int)>* body = nullptr;  // valid until finished == pieces
    std::atomic<int> next{0};                        // the next piece to claim
    Mutex mutex;
    std::condition_variable done_cv;
    int finished PSF_GUARDED_BY(mutex) = 0;
  };

  // Claims and runs pieces of `call` until none is left.
  static void Work(Call& call) {
    for (int p = call.next.fetch_add(1); p < call.pieces; p = call.next.fetch_add(1)) {
      (*call.body)(p);
      MutexLock lock(&call.mutex);
      if (++call.finished == call.pieces) call.done_cv.notify_all();
    }
  }

  void Loop() {
    pthread_setname_np(pthread_self(), "psf-parallel");
    while (true) {
      std::shared_ptr<Call> call;
      {
        MutexLock lock(&mutex_);
        while (true) {
          // Calls with nothing left to claim leave the queue.
          while (!calls_.empty() && calls_.front()->next.load() >= calls_.front()->pieces) calls_.pop_front();
          if (!calls_.empty()) break;
          lock.Wait(&work_cv_);
        }
        call = calls_.front();
      }
      Work(*call);
    }
  }

  Mutex mutex_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Call>> calls_ PSF_GUARDED_BY(mutex_);  // oldest first
  size_t helpers_ PSF_GUARDED_BY(mutex_) = 0;
};

}  // namespace

int ParallelPieces(int threads, size_t n, size_t grain) {
  if (n == 0) return 0;
  const size_t grains = (n + grain - 1) / grain;
  const int wanted = static_cast<int>(std::min<size_t>(std::max(threads, 1), grains));
  // With rounding up, fewer pieces than wanted may already cover n.
  const size_t per = GrainsPerPiece(n, grain, wanted);
  return static_cast<int>((grains + per - 1) / per);
}

void ParallelFor(int threads, size_t n, size_t grain, const std::function<void(int, size_t, size_t)>& body) {
  const int pieces = ParallelPieces(threads, n, grain);
  if (pieces <= 1) {
    if (n > 0) body(0, 0, n);
    return;
  }
  const size_t per = GrainsPerPiece(n, grain, pieces) * grain;
  HelperPool::Get().Run(pieces, [&](int p) {
    const size_t begin = p * per;
    body(p, begin, std::min(n, begin + per));
  });
}

}  // namespace psformer
