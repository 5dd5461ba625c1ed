// ZmqVan: the Van over ZeroMQ (cppzmq), for tcp:// and ipc:// endpoints.
//
// Sockets: Bind listens on a ROUTER (many peers, each answered by the routing id its messages came with, on the ROUTER
// they came to); every endpoint bound shares one, except that where answers are held (options.hold_answers, below) the
// tcp:// endpoints have a ROUTER of their own. Connect opens one DEALER per named peer, or options.streams of them to a
// tcp:// endpoint, each its own connection: a message with a payload leaves on the next of them in turn, one without on
// the first, and each is answered on the connection it came on. Recv polls all of them. High-water marks are off except
// on connections options.send_window holds back (below); ROUTER_MANDATORY makes a send to an unknown peer an
// error instead of a silent drop.
//
// Zero copy: each Frame goes out as its own zmq message built over the frame's bytes with a
// deleter that releases the frame's owner (zmq_msg_init_data), so a payload split into frames
// (AppendViewFrames) streams through ZeroMQ's I/O thread frame by frame, never copied into one
// large buffer. Received frames own their zmq messages.
//
// Authentication (options.curve set, curve_keys.h): Bind serves CURVE with the server secret key
// and starts a ZapHandler that admits only the job's client public key; Connect authenticates with
// the client keypair and trusts only the server public key. CURVE encrypts every frame, so the
// bytes are copied once on each side (into and out of the cipher); zero copy holds up to there.
//
// Holding back (options.send_window > 0, cluster.send_window): on a connection to a tcp:// peer
// ZeroMQ queues at most send_window messages (its high-water mark); what does not fit the Van
// holds, per peer, and hands over by SendRank, the lowest first, as ZeroMQ takes them (on later
// Sends and Recvs, which also wait for room). So when a link is the limit, what the receiver
// needs first leaves first instead of behind everything queued before it (docs/architecture.md,
// "Send priority"). Answers to peers that came over tcp:// are held the same way where
// options.hold_answers is set (a server's); ipc:// connections and answers on them never are (a
// server answers the workers of its own host there, and those must not wait for its thread). The
// kernel's socket buffer below ZeroMQ is a FIFO too: options.send_buffer_bytes caps it on held
// connections. Where options.slice_bytes is set, a held message larger than that leaves as
// slices of at most that many bytes (zmq_slices.h), so that one ranked before it waits behind one
// slice instead of all of it. Where options.yield_answer is set, a ranked held answer it says
// to wait for stays held (retried as a held ROUTER is): a server yields its host's link to the
// sums its host aggregator still has on their way (cluster.sums_first, host_link_board.h). The
// destructor hands over what is held for up to linger_ms.
//
// Sealing (options.sealer, payload_sealer.h): instead of CURVE, every frame is sealed with
// AES-256-GCM by Send on the caller's threads and opened by Recv; a message with a frame that
// does not open arrives with RawMessage::unsealed and transport_error set, for the parser to refuse.
#ifndef PSFORMER_COMMON_TRANSPORT_ZMQ_VAN_H_
#define PSFORMER_COMMON_TRANSPORT_ZMQ_VAN_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/transport/curve_keys.h"
#include "common/transport/payload_sealer.h"
#include "common/transport/van.h"
#include "common/transport/zap_handler.h"
#include "common/transport/zmq_slices.h"

namespace psformer {

struct ZmqVanOptions {
  int io_threads = 1;            // ZeroMQ I/O threads of this Van's context.
  int linger_ms = 1000;          // how long Close waits to flush unsent messages.
  int64_t max_frame_bytes = -1;  // ZMQ_MAXMSGSIZE: larger frames drop the peer (-1 = no limit).
  // ZMQ_SNDTIMEO: a Send that cannot even be queued for this long fails (Unavailable); -1 = wait
  // forever. Queuing waits only while a peer has no connection object at all, which after
  // Connect happens when the peer refused our CURVE handshake (libzmq then drops it).
  int send_timeout_ms = -1;
  // While a Send waits for room (above), asked every kStopCheckMs: true makes that Send fail at
  // once (Unavailable), so a process asked to stop (a signal handler sets what this reads) is not
  // held for send_timeout_ms, whichever of its threads the signal reached. Null = never.
  std::function<bool()> stop_waiting;
  // The job's CURVE keys; unset = no authentication, no encryption. Bind needs server_secret
  // (ForServer), Connect needs client_secret (ForClient).
  std::optional<CurveKeys> curve;
  // Connections Connect opens to a tcp:// peer (cluster.streams); give the context as many I/O
  // threads (io_threads) for them to work in parallel.
  int streams = 1;
  // Every frame sealed on send and opened on receipt (cluster.encryption = AES_256_GCM), on up to
  // seal_threads threads of the caller; null = frames as they are. Not with `curve`.
  std::shared_ptr<PayloadSealer> sealer;
  int seal_threads = 1;
  // Messages ZeroMQ may queue on a connection to a tcp:// peer before this Van holds the rest
  // back and sends them by RawMessage::rank (see above); 0 = every message to ZeroMQ at once, in
  // the order sent. The owner must call Recv regularly while messages are held.
  int send_window = 0;
  // With send_window: answers on tcp:// endpoints this Van binds are held back too.
  bool hold_answers = false;
  // SO_SNDBUF of held connections, bytes (0 = the kernel's own sizing): what the kernel queues
  // below ZeroMQ leaves in the order queued, so a smaller buffer leaves more to be ranked.
  int send_buffer_bytes = 0;
  // With send_window: held messages larger than this leave in slices of at most this many bytes
  // (0 = whole). Any ZmqVan reassembles slices it receives, whatever its own options.
  int slice_bytes = 0;
  // With hold_answers: whether a held answer with a payload, of this rank, waits (for now) instead
  // of being handed to ZeroMQ; asked again every millisecond. Null = none waits.
  std::function<bool(const SendRank&)> yield_answer;
};

class ZmqVan : public Van {
 public:
  explicit ZmqVan(const ZmqVanOptions& options = {});
  ~ZmqVan() override;
  ZmqVan(const ZmqVan&) = delete;
  ZmqVan& operator=(const ZmqVan&) = delete;

  StatusOr<std::string> Bind(const std::string& endpoint) override;
  Status Connect(const std::string& peer, const std::string& endpoint) override;
  Status Send(RawMessage message) override;
  StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) override;

  // CURVE clients refused by this Van's ZAP handler so far (0 without CURVE or Bind). Any thread.
  uint64_t refused_clients() const { return zap_ ? zap_->refused() : 0; }
  // Messages held back now (send_window), over every peer.
  size_t held() const;

 private:
  // A message held back, and how far it got where it leaves in slices.
  struct Outgoing {
    RawMessage message;
    std::optional<SlicePlan> slices;  // set where it leaves in slices
    size_t sent = 0;                  // slices handed over
    std::optional<size_t> stream;     // the connection its slices take, once the first left
    bool yielded = false;             // it waited for options.yield_answer at least once
  };
  // A peer's messages held back: by rank, then by the order they were sent.
  struct Held {
    std::map<std::pair<SendRank, uint64_t>, Outgoing> queue;
    std::chrono::steady_clock::time_point since;  // when it last moved (or began to wait)
    bool warned = false;                          // that it has not moved for send_timeout_ms
  };
  enum class Handed { kSent, kNoRoom };
  struct Router {
    std::unique_ptr<zmq::socket_t> socket;
    bool hold = false;
  };
  // How often a Send waiting for room asks options.stop_waiting.
  static constexpr int kStopCheckMs = 50;
  // Queues frames[from..] to `socket`, waiting for room (send_timeout_ms) if need be. A signal
  // fails no send: an interrupted one goes on (unless options.stop_waiting says to stop).
  Status SendFrames(zmq::socket_t& socket, std::vector<Frame>& frames, const std::string& peer, size_t from);
  // The whole message waiting at `socket` (from `name`, or from the routing id when `router`
  // is set: the index in routers_ it came to); nullopt where that was a slice and more are to
  // come (or it did not fit, logged).
  StatusOr<std::optional<RawMessage>> Receive(zmq::socket_t& socket, std::optional<size_t> router,
                                              const std::string& name);
  // Hands `out` (or its next slice) to ZeroMQ if there is room for it (every Send without a
  // window).
  StatusOr<Handed> HandOver(Outgoing& out);
  // Hands over what is held, lowest rank first, while ZeroMQ has room; a message that cannot be
  // sent is dropped (logged), and a queue that has not moved for send_timeout_ms is logged.
  void SendHeld();
  // High-water mark send_window (and send_buffer_bytes) where `hold`, none otherwise.
  void ConfigureSocket(zmq::socket_t& socket, bool hold);
  // A ROUTER for endpoints that hold (or do not), with the Van's security.
  StatusOr<std::unique_ptr<zmq::socket_t>> MakeRouter(bool hold);
  // Sends the routing id of `peer` (a name Receive made) on its ROUTER: kNoRoom where that
  // ROUTER holds and the peer's connection is full.
  StatusOr<Handed> Route(const std::string& peer, std::vector<Frame>& frames);
  // Whether messages to `peer` are held back (send_window): a tcp:// DEALER or a held ROUTER.
  bool Holds(const std::string& peer) const;
  // Whether `out`, an answer on a held ROUTER, waits for options.yield_answer (counted once).
  bool Yields(Outgoing& out);
  // Whether a message to `peer` waits on a held ROUTER (whose room a poll cannot see).
  bool Routed(const std::string& peer) const;
  // The ROUTER a routed peer's name (made by Receive) points at; null for any other name.
  const Router* RouterOf(const std::string& peer) const;

  ZmqVanOptions options_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // after a CURVE Bind.
  // After Bind: at most two, one that holds and one that does not. A routed peer's name is a
  // zero byte, the index of its ROUTER, and its routing id (so never a Connect name).
  std::vector<Router> routers_;
  struct Peer {
    std::vector<std::unique_ptr<zmq::socket_t>> streams;  // one DEALER (connection) each
    size_t next = 0;                                      // the stream the next payload takes
    bool hold = false;                                    // a tcp:// peer, with send_window set
  };
  std::map<std::string, Peer> dealers_;  // by peer name.
  size_t next_poll_ = 0;                 // round-robin start, so no socket starves the others.
  std::map<std::string, Held> held_;     // by peer name; empty queues are removed.
  uint64_t sent_ = 0;                    // messages given to Send, to order equal ranks; slices' ids.
  SliceAssembler assembler_;             // slices received, until their messages are whole
  uint64_t yielded_ = 0;                 // answers that waited for options.yield_answer
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_ZMQ_VAN_H_
