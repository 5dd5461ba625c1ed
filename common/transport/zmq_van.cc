#include "common/transport/zmq_van.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "common/logging.h"

namespace psformer {
namespace {

// ZeroMQ frees a zero-copy message from its I/O thread through a C callback; the hint carries
// a heap copy of the frame's owner whose ownership passes through the C API and back here.
void ReleaseOwner(void* /*data*/, void* hint) {
  std::unique_ptr<std::shared_ptr<const void>> owner(static_cast<std::shared_ptr<const void>*>(hint));
}

zmq::message_t ZeroCopyMessage(const Frame& frame) {
  if (frame.size() == 0) return zmq::message_t();
  auto hint = std::make_unique<std::shared_ptr<const void>>(frame.owner());
  zmq::message_t msg(const_cast<uint8_t*>(frame.data()), frame.size(), &ReleaseOwner, hint.get());
  hint.release();  // now owned by ZeroMQ until ReleaseOwner runs.
  return msg;
}

Frame FrameOf(zmq::message_t msg) {
  auto owned = std::make_shared<zmq::message_t>(std::move(msg));
  return Frame::View(owned->data(), owned->size(), owned);
}

// How often Recv retries answers held on a ROUTER, whose room a poll does not show.
constexpr int kRoutedRetryMs = 1;

// "tcp://host:0" asks for any free port; ZeroMQ spells that "tcp://host:*".
std::string WildcardPort(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) == 0 && endpoint.size() > 2 && endpoint.compare(endpoint.size() - 2, 2, ":0") == 0) {
    return endpoint.substr(0, endpoint.size() - 1) + "*";
  }
  return endpoint;
}

}  // namespace

ZmqVan::ZmqVan(const ZmqVanOptions& options)
    : options_(options), context_(options.io_threads), assembler_(options.max_frame_bytes) {}

ZmqVan::~ZmqVan() {
  // What is still held goes to ZeroMQ first, while the peers take it, for up to the linger; no
  // answer waits on the host's sums any more.
  if (options_.yield_answer) PSF_LOG(Info) << "van: " << yielded_ << " answer(s) waited for this host's sums";
  options_.yield_answer = nullptr;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(options_.linger_ms, 0));
  while (!held_.empty() && std::chrono::steady_clock::now() < until) {
    SendHeld();
    if (!held_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!held_.empty()) PSF_LOG(Warning) << "van: closing with " << held() << " message(s) not sent";
  // Sockets close before the context terminates (members would go in the other order).
  routers_.clear();
  dealers_.clear();
  zap_.reset();
}

void ZmqVan::ConfigureSocket(zmq::socket_t& socket, bool hold) {
  socket.set(zmq::sockopt::sndhwm, hold ? options_.send_window : 0);
  if (hold && options_.send_buffer_bytes > 0) socket.set(zmq::sockopt::sndbuf, options_.send_buffer_bytes);
  socket.set(zmq::sockopt::rcvhwm, 0);
  socket.set(zmq::sockopt::linger, options_.linger_ms);
  if (options_.max_frame_bytes >= 0) socket.set(zmq::sockopt::maxmsgsize, options_.max_frame_bytes);
  // With stop_waiting, the wait for room is taken in short turns (SendFrames counts them).
  int wait_ms = options_.send_timeout_ms;
  if (options_.stop_waiting) wait_ms = wait_ms < 0 ? kStopCheckMs : std::min(wait_ms, kStopCheckMs);
  if (wait_ms >= 0) socket.set(zmq::sockopt::sndtimeo, wait_ms);
}

StatusOr<std::unique_ptr<zmq::socket_t>> ZmqVan::MakeRouter(bool hold) {
  auto socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::router);
  ConfigureSocket(*socket, hold);
  socket->set(zmq::sockopt::router_mandatory, 1);
  if (options_.curve) {
    const CurveKeys& keys = *options_.curve;
    if (keys.server_secret.empty() || keys.client_public.empty()) {
      return Status::InvalidArgument("van: a CURVE server needs the server secret and the client public key");
    }
    // The handler is bound before the socket listens: libzmq admits everyone while none is.
    if (!zap_) {
      auto zap = ZapHandler::Start(context_, CurveKeyBytes(keys.client_public));
      if (!zap.ok()) return zap.status();
      zap_ = std::move(*zap);
    }
    socket->set(zmq::sockopt::zap_domain, "psformer");
    socket->set(zmq::sockopt::curve_server, 1);
    socket->set(zmq::sockopt::curve_secretkey, keys.server_secret);
  }
  return socket;
}

StatusOr<std::string> ZmqVan::Bind(const std::string& endpoint) {
  // A ROUTER listens on every endpoint bound that holds alike (a server's tcp:// apart from its
  // ipc:// where its answers are held), with the security it was made with.
  const bool hold = endpoint.rfind("tcp://", 0) == 0 && options_.hold_answers && options_.send_window > 0;
  try {
    for (Router& router : routers_) {
      if (router.hold != hold) continue;
      router.socket->bind(WildcardPort(endpoint));
      return router.socket->get(zmq::sockopt::last_endpoint);
    }
    PSF_ASSIGN_OR_RETURN(auto socket, MakeRouter(hold));
    socket->bind(WildcardPort(endpoint));
    std::string bound = socket->get(zmq::sockopt::last_endpoint);
    routers_.push_back(Router{std::move(socket), hold});
    return bound;
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("van: cannot bind " + endpoint + ": " + e.what());
  }
}

Status ZmqVan::Connect(const std::string& peer, const std::string& endpoint) {
  if (peer.empty() || peer[0] == '\0') return Status::InvalidArgument("van: invalid peer name for " + endpoint);
  if (dealers_.count(peer)) return Status::InvalidArgument("van: peer " + peer + " is already connected");
  if (options_.curve && options_.curve->client_secret.empty()) {
    return Status::InvalidArgument("van: a CURVE client needs the client secret key to connect to " + endpoint);
  }
  const bool tcp = endpoint.rfind("tcp://", 0) == 0;
  const int streams = tcp ? std::max(options_.streams, 1) : 1;
  Peer connected;
  connected.hold = tcp && options_.send_window > 0;
  try {
    for (int k = 0; k < streams; ++k) {
      auto socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
      ConfigureSocket(*socket, connected.hold);
      if (options_.curve) {
        const CurveKeys& keys = *options_.curve;
        socket->set(zmq::sockopt::curve_serverkey, keys.server_public);
        socket->set(zmq::sockopt::curve_publickey, keys.client_public);
        socket->set(zmq::sockopt::curve_secretkey, keys.client_secret);
      }
      socket->connect(endpoint);
      connected.streams.push_back(std::move(socket));
    }
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("van: cannot connect to " + peer + " at " + endpoint + ": " + e.what());
  }
  dealers_.emplace(peer, std::move(connected));
  return Status::Ok();
}

Status ZmqVan::SendFrames(zmq::socket_t& socket, std::vector<Frame>& frames, const std::string& peer, size_t from) {
  const auto start = std::chrono::steady_clock::now();
  const auto waited_out = [&] {
    return options_.send_timeout_ms >= 0 &&
           std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(options_.send_timeout_ms);
  };
  for (size_t i = from; i < frames.size(); ++i) {
    const bool last = i + 1 == frames.size();
    while (true) {
      try {
        if (socket.send(ZeroCopyMessage(frames[i]), last ? zmq::send_flags::none : zmq::send_flags::sndmore)) break;
      } catch (const zmq::error_t& e) {
        // A signal reached this thread (a stop request, whichever thread it was meant for):
        // nothing was queued, and the send goes on as a wait for room would.
        if (e.num() != EINTR) return Status::Unavailable("van: send to peer failed: " + std::string(e.what()));
      }
      if (options_.stop_waiting && options_.stop_waiting()) {
        return Status::Unavailable("van: asked to stop while waiting for room to queue a message to " + peer +
                                   (options_.curve ? " (did it refuse this process's CURVE keys?)" : ""));
      }
      if (waited_out()) {
        return Status::Unavailable("van: cannot queue a message to " + peer + " for " +
                                   std::to_string(options_.send_timeout_ms) + " ms" +
                                   (options_.curve ? " (did it refuse this process's CURVE keys?)" : ""));
      }
    }
  }
  return Status::Ok();
}

StatusOr<ZmqVan::Handed> ZmqVan::HandOver(Outgoing& out) {
  const RawMessage& message = out.message;
  std::vector<Frame> slice;
  if (out.slices) slice = out.slices->Slice(out.sent);
  std::vector<Frame>& frames = out.slices ? slice : out.message.frames;
  auto it = dealers_.find(message.peer);
  if (it == dealers_.end()) {
    PSF_ASSIGN_OR_RETURN(const Handed handed, Route(message.peer, frames));
    if (handed == Handed::kSent) ++out.sent;
    return handed;
  }
  // Payloads take the streams in turn; a message of one frame (a request without payload) the
  // first, so that requests to a peer without payload keep their order. Held back, a payload
  // takes the first of them, from its turn on, with room; the slices of one message all take
  // the stream its first took.
  Peer& p = it->second;
  const bool hold = p.hold;
  const bool payload = frames.size() > 1;
  const size_t tries = out.stream || !payload ? 1 : p.streams.size();
  for (size_t k = 0; k < tries; ++k) {
    const size_t stream = out.stream ? *out.stream : payload ? (p.next + k) % p.streams.size() : 0;
    zmq::socket_t& socket = *p.streams[stream];
    if (hold) {
      // The first frame without waiting: ZeroMQ counts whole messages against the high-water
      // mark, so once it is taken the rest always are.
      try {
        if (!socket.send(ZeroCopyMessage(frames[0]),
                         (payload ? zmq::send_flags::sndmore : zmq::send_flags::none) | zmq::send_flags::dontwait)) {
          continue;
        }
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;  // a signal, as for no room: held, and tried again
        return Status::Unavailable("van: send to peer failed: " + std::string(e.what()));
      }
    }
    if (payload && !out.stream) p.next = stream + 1;
    PSF_RETURN_IF_ERROR(SendFrames(socket, frames, message.peer, hold ? 1 : 0));
    if (out.slices) out.stream = stream;
    ++out.sent;
    return Handed::kSent;
  }
  return Handed::kNoRoom;
}

const ZmqVan::Router* ZmqVan::RouterOf(const std::string& peer) const {
  if (peer.size() < 2 || peer[0] != '\0' || static_cast<size_t>(peer[1]) >= routers_.size()) return nullptr;
  return &routers_[static_cast<size_t>(peer[1])];
}

bool ZmqVan::Routed(const std::string& peer) const {
  const Router* router = RouterOf(peer);
  return router != nullptr && router->hold;
}

StatusOr<ZmqVan::Handed> ZmqVan::Route(const std::string& peer, std::vector<Frame>& frames) {
  const Router* found = RouterOf(peer);
  if (found == nullptr) {
    return Status::Unavailable("van: unknown peer (not connected, and not one that wrote to this Van)");
  }
  const Router& router = *found;
  // The routing id goes first; ROUTER_MANDATORY turns an unknown id into EHOSTUNREACH and, on
  // a ROUTER that holds, a full connection into EAGAIN (whole messages count against it, so
  // once the id is taken the rest always are). A signal (EINTR) queued nothing: sent again.
  const auto flags = zmq::send_flags::sndmore | (router.hold ? zmq::send_flags::dontwait : zmq::send_flags::none);
  while (true) {
    try {
      if (!router.socket->send(zmq::buffer(peer.data() + 2, peer.size() - 2), flags)) return Handed::kNoRoom;
      break;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return Status::Unavailable("van: peer unreachable: " + std::string(e.what()));
    }
  }
  PSF_RETURN_IF_ERROR(SendFrames(*router.socket, frames, "routed peer", 0));
  return Handed::kSent;
}

bool ZmqVan::Yields(Outgoing& out) {
  if (!options_.yield_answer || out.message.rank.step == INT64_MIN || !Routed(out.message.peer) ||
      !options_.yield_answer(out.message.rank)) {
    return false;
  }
  if (!out.yielded) ++yielded_;
  out.yielded = true;
  return true;
}

bool ZmqVan::Holds(const std::string& peer) const {
  auto it = dealers_.find(peer);
  return it != dealers_.end() ? it->second.hold : Routed(peer);
}

Status ZmqVan::Send(RawMessage message) {
  if (message.frames.empty()) return Status::InvalidArgument("van: refusing to send a message without frames");
  SealHeader(message);
  if (options_.sealer) message.frames = options_.sealer->SealAll(message.frames, options_.seal_threads);
  if (!held_.empty()) SendHeld();
  Outgoing out;
  out.message = std::move(message);
  if (options_.slice_bytes > 0 && Holds(out.message.peer) &&
      BytesOf(out.message.frames) > static_cast<uint64_t>(options_.slice_bytes)) {
    out.slices.emplace(out.message.frames, options_.slice_bytes, sent_);
  }
  const std::string peer = out.message.peer;
  // Behind others still held for the peer it waits among them, by rank; else it goes if it fits
  // (one in slices waits among the held, where its slices leave from).
  if (!held_.count(peer) && !out.slices && !Yields(out)) {
    PSF_ASSIGN_OR_RETURN(const Handed handed, HandOver(out));
    if (handed == Handed::kSent) return Status::Ok();
  }
  Held& h = held_[peer];
  if (h.queue.empty()) h.since = std::chrono::steady_clock::now();
  const SendRank rank = out.message.rank;
  const bool sliced = out.slices.has_value();
  h.queue.emplace(std::make_pair(rank, sent_++), std::move(out));
  if (sliced) SendHeld();
  return Status::Ok();
}

void ZmqVan::SendHeld() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = held_.begin(); it != held_.end();) {
    Held& h = it->second;
    size_t dropped = 0;
    std::string why;
    while (!h.queue.empty()) {
      Outgoing& out = h.queue.begin()->second;
      if (Yields(out)) break;
      auto handed = HandOver(out);
      if (!handed.ok()) {
        // A broken connection: the message is lost as on the wire, and its sender's resend heals
        // or reports it.
        ++dropped;
        why = handed.status().message();
      } else if (*handed == Handed::kNoRoom) {
        break;
      }
      h.since = now;
      h.warned = false;
      // A message in slices stays first until its last slice left (or one ranked before it came).
      if (handed.ok() && out.slices && out.sent < out.slices->size()) continue;
      h.queue.erase(h.queue.begin());
    }
    if (dropped > 0) PSF_LOG(Warning) << "van: dropped " << dropped << " held message(s): " << why;
    if (h.queue.empty()) {
      it = held_.erase(it);
      continue;
    }
    // A queue that does not move is a peer that does not read (dead, restarting, or refusing
    // this process's CURVE keys); the requests' own deadlines decide what that means.
    if (!h.warned && options_.send_timeout_ms >= 0 &&
        now - h.since >= std::chrono::milliseconds(options_.send_timeout_ms)) {
      h.warned = true;
      PSF_LOG(Warning) << "van: " << h.queue.size() << " message(s) to " << it->first << " waited "
                       << options_.send_timeout_ms << " ms for room"
                       << (options_.curve ? " (did it refuse this process's CURVE keys?)" : "");
    }
    ++it;
  }
}

size_t ZmqVan::held() const {
  size_t n = 0;
  for (const auto& [peer, h] : held_) n += h.queue.size();
  return n;
}

StatusOr<std::optional<RawMessage>> ZmqVan::Recv(int timeout_ms) {
  std::vector<zmq::socket_t*> sockets;
  std::vector<std::string> names;
  for (const Router& router : routers_) {
    sockets.push_back(router.socket.get());
    names.emplace_back();
  }
  for (auto& [name, peer] : dealers_) {
    for (auto& socket : peer.streams) {
      sockets.push_back(socket.get());
      names.push_back(name);
    }
  }
  if (sockets.empty()) return Status::Unavailable("van: nothing bound or connected to receive from");
  const auto start = std::chrono::steady_clock::now();
  try {
    while (true) {
      // Held messages go out as room appears: a connection with some waits for room too.
      SendHeld();
      std::vector<zmq::pollitem_t> items;
      for (size_t i = 0; i < sockets.size(); ++i) {
        short events = ZMQ_POLLIN;
        if (i < routers_.size()) {
          // A ROUTER is always writable to a poll (its room is per peer): held answers are
          // retried every millisecond instead (below).
        } else if (auto h = held_.find(names[i]); h != held_.end()) {
          // Room on a connection the first held message may take: any for a payload, the first
          // for a request (which keeps to it), its own for one whose slices began to leave.
          const Outgoing& first = h->second.queue.begin()->second;
          const auto& streams = dealers_.at(names[i]).streams;
          const bool payload = first.message.frames.size() > 1;
          const zmq::socket_t* own = first.stream ? streams[*first.stream].get() : streams.front().get();
          if ((payload && !first.stream) || sockets[i] == own) events |= ZMQ_POLLOUT;
        }
        items.push_back({sockets[i]->handle(), 0, events, 0});
      }
      if (wake_fd_ >= 0) items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});  // last: no socket's index
      int wait_ms = timeout_ms;
      if (timeout_ms > 0) {
        const auto spent =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
        wait_ms = std::max<int>(0, timeout_ms - static_cast<int>(spent.count()));
      }
      if (std::any_of(held_.begin(), held_.end(), [this](const auto& h) { return Routed(h.first); })) {
        wait_ms = wait_ms < 0 ? kRoutedRetryMs : std::min(wait_ms, kRoutedRetryMs);
      }
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(wait_ms));
      bool sliced = false;  // a slice arrived, and its message is not whole yet
      const size_t from = next_poll_;
      for (size_t k = 0; k < sockets.size(); ++k) {
        const size_t i = (from + k) % sockets.size();
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        next_poll_ = i + 1;
        const std::optional<size_t> router = i < routers_.size() ? std::optional<size_t>(i) : std::nullopt;
        PSF_ASSIGN_OR_RETURN(std::optional<RawMessage> message, Receive(*sockets[i], router, names[i]));
        if (message) return message;
        sliced = true;
      }
      // No whole message arrived: a wait that is over ends, one that woke for room or for a
      // slice goes on, unless the wake descriptor says there is other work.
      const bool woken = wake_fd_ >= 0 && (items.back().revents & ZMQ_POLLIN);
      if ((held_.empty() && !sliced) || woken ||
          (timeout_ms >= 0 && std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(timeout_ms))) {
        return std::optional<RawMessage>();
      }
    }
  } catch (const zmq::error_t& e) {
    // A signal (SIGTERM asking a role to stop) interrupts the poll: nothing arrived, the caller
    // looks at its stop flag and polls again.
    if (e.num() == EINTR) return std::optional<RawMessage>();
    return Status::Unavailable("van: receive failed: " + std::string(e.what()));
  }
}

StatusOr<std::optional<RawMessage>> ZmqVan::Receive(zmq::socket_t& socket, std::optional<size_t> router,
                                                    const std::string& name) {
  RawMessage message;
  message.peer = name;
  bool first = true;
  while (true) {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::dontwait)) {
      if (first) return std::optional<RawMessage>();  // nothing after all
      return Status::Internal("van: message ended early (a part was announced but missing)");
    }
    const bool more = part.more();
    if (router && first) {
      message.peer = std::string(1, '\0') + static_cast<char>(*router) + part.to_string();
    } else {
      message.frames.push_back(FrameOf(std::move(part)));
    }
    first = false;
    if (!more) break;
  }
  if (IsSlice(message.frames)) {
    auto whole = assembler_.Take(message.peer, std::move(message.frames));
    if (!whole.ok()) {
      // Its message is lost as on the wire; the sender's resend heals or reports it.
      PSF_LOG(Warning) << whole.status().message() << " from "
                       << (router ? "a peer that connected over " +
                                        routers_[*router].socket->get(zmq::sockopt::last_endpoint)
                                  : name);
      return std::optional<RawMessage>();
    }
    if (!*whole) return std::optional<RawMessage>();
    message.frames = std::move(**whole);
  }
  if (options_.sealer) {
    auto opened = options_.sealer->OpenAll(message.frames, options_.seal_threads);
    if (opened.ok()) {
      message.frames = std::move(*opened);
    } else {
      message.unsealed = true;
      message.transport_error = opened.status().message();
    }
  }
  return std::optional<RawMessage>(std::move(message));
}

}  // namespace psformer
