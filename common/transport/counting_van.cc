#include "common/transport/counting_van.h"

namespace psformer {

Status CountingVan::Send(RawMessage message) {
  const uint64_t bytes = BytesOf(message.frames);
  PSF_RETURN_IF_ERROR(inner_->Send(std::move(message)));
  traffic_->messages_out.fetch_add(1, std::memory_order_relaxed);
  traffic_->bytes_out.fetch_add(bytes, std::memory_order_relaxed);
  return Status::Ok();
}

StatusOr<std::optional<RawMessage>> CountingVan::Recv(int timeout_ms) {
  auto received = inner_->Recv(timeout_ms);
  if (received.ok() && received->has_value()) {
    traffic_->messages_in.fetch_add(1, std::memory_order_relaxed);
    traffic_->bytes_in.fetch_add(BytesOf((*received)->frames), std::memory_order_relaxed);
  }
  return received;
}

}  // namespace psformer
