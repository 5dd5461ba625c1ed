#include "pserver/client/resender.h"

#include <algorithm>
#include <utility>

#include "pserver/timing.h"

namespace psformer {

std::shared_ptr<const void> Resender::Sent(Send* send, Clock::time_point now,
                                           std::shared_ptr<const void> payload_owner) const {
  send->sent_at_ = now;
  ++send->count_;
  if (!payload_owner) {
    send->left_ = nullptr;
    return nullptr;
  }
  auto left = std::make_shared<std::atomic<int64_t>>(Send::kNotYet);
  send->left_ = left;
  // An aliasing owner for the frames: it points where payload_owner does; its deleter (run when
  // the transport lets go of the last frame: handed to the kernel, copied, or dropped) stamps
  // the time, then lets payload_owner go.
  const void* data = payload_owner.get();
  return std::shared_ptr<const void>(data, [left, owner = std::move(payload_owner)](const void*) mutable {
    left->store(Clock::now().time_since_epoch().count());
    owner.reset();
  });
}

bool Resender::Due(const Send& send, int peer, uint64_t awaited_bytes, Clock::time_point now) const {
  if (retry_ms_ <= 0 || send.count_ == 0 || send.in_transport()) return false;
  Clock::time_point from = std::max(send.sent_at_, heard_[peer]);
  if (send.left_ != nullptr) from = std::max(from, Clock::time_point(Clock::duration(send.left_->load())));
  return now - from >= Wait(send.count_, awaited_bytes);
}

std::chrono::milliseconds Resender::Wait(int sends, uint64_t awaited_bytes) const {
  const auto on_the_wire = std::chrono::milliseconds(awaited_bytes * 1000 / kSlowestLinkBytesPerSecond);
  return RetryInterval(retry_ms_, std::max(sends, 1)) + on_the_wire;
}

}  // namespace psformer
