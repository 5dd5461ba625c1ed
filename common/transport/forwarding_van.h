// ForwardingVan: the base of Vans that decorate another Van (FaultyVan, CountingVan, ShmVan):
// every method forwards to the inner Van, so a decorator overrides only what it changes.
#ifndef PSFORMER_COMMON_TRANSPORT_FORWARDING_VAN_H_
#define PSFORMER_COMMON_TRANSPORT_FORWARDING_VAN_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/transport/van.h"

namespace psformer {

class ForwardingVan : public Van {
 public:
  explicit ForwardingVan(std::unique_ptr<Van> inner) : inner_(std::move(inner)) {}

  StatusOr<std::string> Bind(const std::string& endpoint) override { return inner_->Bind(endpoint); }
  Status Connect(const std::string& peer, const std::string& endpoint) override {
    return inner_->Connect(peer, endpoint);
  }
  Status Send(RawMessage message) override { return inner_->Send(std::move(message)); }
  bool ChecksumsPayloadTo(const std::string& peer) const override { return inner_->ChecksumsPayloadTo(peer); }
  std::shared_ptr<void> AllocatePayload(size_t bytes) override { return inner_->AllocatePayload(bytes); }
  void TakeBackUnclaimed() override { inner_->TakeBackUnclaimed(); }
  void PinPeerMemory(PinFn pin) override { inner_->PinPeerMemory(std::move(pin)); }
  bool PeerMemoryPinned(const void* data, size_t n) const override { return inner_->PeerMemoryPinned(data, n); }
  StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) override { return inner_->Recv(timeout_ms); }
  void WakeOn(int fd) override {
    wake_fd_ = fd;
    inner_->WakeOn(fd);
  }

  Van& inner() { return *inner_; }

 protected:
  std::unique_ptr<Van> inner_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_FORWARDING_VAN_H_
