#include "worker/datapath/gradient_outbound.h"

#include <pthread.h>

#include <utility>

#include "common/trace.h"

namespace psformer {

GradientOutbound::GradientOutbound(RangeDownloader* copies, ClientThread* client, Sink sink)
    : copies_(copies), client_(client), sink_(std::move(sink)), thread_([this] { Loop(); }) {}

GradientOutbound::~GradientOutbound() {
  queue_.Close();
  thread_.join();
}

void GradientOutbound::Copying(ElementRange range, const StepStats& stats) {
  {
    MutexLock lock(&mutex_);
    ++handed_;
  }
  queue_.Push({range, stats});
}

void GradientOutbound::Drain() {
  MutexLock lock(&mutex_);
  while (posted_ != handed_) lock.Wait(&posted_cv_);
}

void GradientOutbound::Loop() {
  pthread_setname_np(pthread_self(), "psf-d2h");
  while (std::optional<Item> item = queue_.Pop()) {
    const ElementRange copied = [&] {
      const TraceSpan traced("d2h_wait", static_cast<int64_t>(item->range.begin),
                             static_cast<int64_t>(item->range.end));
      return copies_->WaitOldest();
    }();
    PSF_CHECK(copied == item->range);  // copies complete in the order they were handed over
    client_->Post([this, item = *item](PsClient& client) { sink_(client, item.range, item.stats); });
    {
      MutexLock lock(&mutex_);
      ++posted_;
    }
    posted_cv_.notify_all();
  }
}

}  // namespace psformer
