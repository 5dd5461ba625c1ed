// CountingVan: a Van that counts the messages and bytes going through another Van, for a
// process's own view of its traffic (the parameter server's TensorBoard scalars). Bytes are the
// frames' bytes, as handed to Send and returned by Recv; ZeroMQ's own framing and CURVE's
// overhead are not counted.
//
// Thread safety: as any Van, one thread at a time; the counters (VanTraffic) may be read from
// any thread while it works.
#ifndef PSFORMER_COMMON_TRANSPORT_COUNTING_VAN_H_
#define PSFORMER_COMMON_TRANSPORT_COUNTING_VAN_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/transport/forwarding_van.h"

namespace psformer {

// What a CountingVan moved so far. A message counts as sent once the inner Van took it.
struct VanTraffic {
  std::atomic<uint64_t> messages_in{0};
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> messages_out{0};
  std::atomic<uint64_t> bytes_out{0};
};

class CountingVan : public ForwardingVan {
 public:
  // `traffic` is shared so that a reader may outlive the Van (the Van usually belongs to a server).
  CountingVan(std::unique_ptr<Van> inner, std::shared_ptr<VanTraffic> traffic)
      : ForwardingVan(std::move(inner)), traffic_(std::move(traffic)) {}

  Status Send(RawMessage message) override;
  StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) override;

 private:
  std::shared_ptr<VanTraffic> traffic_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_COUNTING_VAN_H_
