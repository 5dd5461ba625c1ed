// Van: the transport behind the parameter server (after ps-lite's Van). A Van is one node's
// endpoint: it may Bind an address that peers connect to, and Connect to named peers; it
// sends and receives whole multipart messages (RawMessage). What the frames mean is wire/'s
// business; a Van only moves them. ZeroMQ is one implementation (zmq_van.h); tests may
// substitute one that drops, delays or reorders messages.
//
// Thread safety: a Van is used by one thread at a time (ZeroMQ sockets are not thread-safe).
#ifndef PSFORMER_COMMON_TRANSPORT_VAN_H_
#define PSFORMER_COMMON_TRANSPORT_VAN_H_

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/transport/frame.h"

namespace psformer {

class Van {
 public:
  virtual ~Van() = default;

  // Listens on `endpoint` ("tcp://HOST:PORT", port 0 or "*" = any free port; "ipc://PATH").
  // Returns the endpoint peers should connect to (with the chosen port filled in). A Van may
  // listen on several endpoints (Bind again); messages from all of them arrive through Recv.
  virtual StatusOr<std::string> Bind(const std::string& endpoint) = 0;

  // Opens a connection to `endpoint` under the local name `peer` (non-empty, not starting with
  // a zero byte, unique in this Van). Messages to that peer are queued until it is reachable.
  virtual Status Connect(const std::string& peer, const std::string& endpoint) = 0;

  // Sends all frames of `message` to `message.peer` as one multipart message. Frames are handed
  // over without copying; their owners are released when the transport is done with the bytes.
  // Fails (Unavailable) for a peer this Van does not know.
  virtual Status Send(RawMessage message) = 0;

  // Whether Send computes the payload's CRC-32C itself, in the pass that copies the payload, for
  // messages to `peer` that leave it to the Van (RawMessage::seal_header). False: it is cheaper
  // for the sender to compute it; a Van that is asked anyway seals in a pass of its own.
  virtual bool ChecksumsPayloadTo(const std::string& /*peer*/) const { return false; }

  // Memory for a payload this process sends many times over (a server's parameter snapshot,
  // pulled by every worker), `bytes` long and 64-byte aligned, alive while the pointer (or a
  // Frame viewing it) is. A Van that copies payloads into shared memory hands out memory it can
  // lend to same-host receivers in place, without a copy per send; the default is the heap.
  virtual std::shared_ptr<void> AllocatePayload(size_t bytes) { return HeapPayload(bytes); }
  static std::shared_ptr<void> HeapPayload(size_t bytes) {
    return std::shared_ptr<void>(::operator new (std::max<size_t>(bytes, 1), std::align_val_t{64}),
                                 [](void* p) { ::operator delete (p, std::align_val_t{64}); });
  }

  // Takes back, at once, the AllocatePayload memory this process lent for messages no receiver
  // has claimed (their receivers died, or the messages were lost): a caller that knows no one
  // will come for them (every peer answered a later message on the same connections) need not
  // wait for the Van's patience. Memory a live receiver claimed stays lent until it lets go.
  virtual void TakeBackUnclaimed() {}

  // For a receiver whose device reads received payloads where they lie (a GPU worker uploading
  // pulled parameters): every shared-memory segment of a peer this Van maps, now and later, is
  // registered with `pin` (the driver's cudaHostRegister), which returns what unregisters it, or
  // null where it could not. PeerMemoryPinned: whether `n` bytes at `data` (a received frame's)
  // lie in a segment so registered. A Van that maps no peer memory (the default) has none.
  using PinFn = std::function<std::shared_ptr<void>(void* data, size_t bytes)>;
  virtual void PinPeerMemory(PinFn /*pin*/) {}
  virtual bool PeerMemoryPinned(const void* /*data*/, size_t /*n*/) const { return false; }

  // Waits up to `timeout_ms` (-1 = forever, 0 = poll) for the next whole message from any peer.
  // Returns nullopt when none arrived in time, or when the wake descriptor is readable.
  virtual StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) = 0;

  // A descriptor (an eventfd, common/wakeup.h) that ends a Recv's wait as soon as it is readable,
  // so that the thread receiving also hears of work that comes another way (a command queued for
  // it, a piece landed) without waiting for its poll to time out; -1 for none. The Van never reads
  // it: its owner drains it before it looks for that work. Decorators pass it on.
  virtual void WakeOn(int fd) { wake_fd_ = fd; }

 protected:
  // Whether the wake descriptor is readable now (a decorator's Recv that waits in several rounds
  // stops at the first it sees).
  bool Woken() const;

  int wake_fd_ = -1;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_VAN_H_
