// GradientOutbound: the stage of the data path between the device and the client thread
// (docs/architecture.md, "The worker's data path"). The launching thread hands it each layer's
// gradient range as soon as that range's device-to-host copy has been started (Copying: a queue
// push, nothing else); the stage's own thread sleeps until the copy is complete
// (RangeDownloader::WaitOldest) and posts the range to the client thread, which pushes it. So the
// thread that launches kernels never waits for a copy, a checksum or a socket.
//
// Thread safety: Copying and Drain from the launching thread; the rest is the stage's own.
#ifndef PSFORMER_WORKER_DATAPATH_GRADIENT_OUTBOUND_H_
#define PSFORMER_WORKER_DATAPATH_GRADIENT_OUTBOUND_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <thread>

#include "common/thread_annotations.h"
#include "worker/backend/range_downloader.h"
#include "worker/datapath/client_thread.h"
#include "worker/datapath/stage_queue.h"
#include "worker/model/transformer.h"

namespace psformer {

class GradientOutbound {
 public:
  // What the client thread does with a range whose bytes are on the host.
  using Sink = std::function<void(PsClient& client, ElementRange range, const StepStats& stats)>;

  // REQUIRES: `copies` and `client` outlive the stage; every copy started on `copies` is handed
  // to Copying, in start order.
  GradientOutbound(RangeDownloader* copies, ClientThread* client, Sink sink);
  // Waits for the copies handed over and posts them, then stops the thread.
  ~GradientOutbound();
  GradientOutbound(const GradientOutbound&) = delete;
  GradientOutbound& operator=(const GradientOutbound&) = delete;

  // The copy of `range` has been started; `stats` are the step's.
  void Copying(ElementRange range, const StepStats& stats);
  // Sleeps until every range handed over has been copied and posted to the client thread (so a
  // command posted after Drain runs after their pushes).
  void Drain();

 private:
  struct Item {
    ElementRange range;
    StepStats stats;
  };
  void Loop();

  RangeDownloader* copies_;
  ClientThread* client_;
  Sink sink_;
  StageQueue<Item> queue_;
  Mutex mutex_;
  std::condition_variable posted_cv_;
  uint64_t handed_ PSF_GUARDED_BY(mutex_) = 0;  // ranges given to Copying...
  uint64_t posted_ PSF_GUARDED_BY(mutex_) = 0;  // ...and posted to the client thread
  std::thread thread_;   // last: starts once the rest is built
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATAPATH_GRADIENT_OUTBOUND_H_
