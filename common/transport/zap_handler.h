// ZapHandler: the ZeroMQ authentication handler (ZAP, RFC 27) of a CURVE server. ZeroMQ asks it,
// over inproc://zeromq.zap.01 in the server's context, whether a client that completed the CURVE
// handshake may connect; it answers 200 for the job's client public key and 400 for any other,
// and ZeroMQ drops a refused connection before a single message of it is delivered.
//
// Without a handler bound, libzmq admits every CURVE client that knows the server key, so the
// handler must be bound before the server socket accepts connections: Start binds it at once.
// One small thread answers requests; the destructor stops and joins it.
#ifndef PSFORMER_COMMON_TRANSPORT_ZAP_HANDLER_H_
#define PSFORMER_COMMON_TRANSPORT_ZAP_HANDLER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "common/status.h"

namespace psformer {

class ZapHandler {
  struct StartKey {};  // only Start builds handlers (it must bind before the thread runs).

 public:
  // Binds the ZAP endpoint in `context` (which must outlive the handler) and starts answering:
  // only `allowed_client_key` (32 raw bytes) is admitted. Fails if the context already has one.
  static StatusOr<std::unique_ptr<ZapHandler>> Start(zmq::context_t& context, std::string allowed_client_key);
  ZapHandler(StartKey, zmq::socket_t socket, std::string allowed_client_key);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  uint64_t admitted() const { return admitted_.load(); }  // handshakes answered 200; any thread.
  uint64_t refused() const { return refused_.load(); }    // handshakes answered 400; any thread.

 private:
  void Serve();
  void Answer();

  zmq::socket_t socket_;  // REP; used only by thread_ once it runs.
  const std::string allowed_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> admitted_{0};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_ZAP_HANDLER_H_
