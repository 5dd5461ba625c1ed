#include "common/transport/zap_handler.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <vector>

#include "common/logging.h"

namespace psformer {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr int kPollMs = 100;  // how soon the thread notices the destructor.

// A refusal is logged for the first few clients, then once in a while: a foreign client that
// keeps reconnecting must not flood the log.
bool WorthLogging(uint64_t refused) { return refused <= 5 || refused % 1000 == 0; }

}  // namespace

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& context, std::string allowed_client_key) {
  if (allowed_client_key.size() != 32) return Status::InvalidArgument("zap: a CURVE public key has 32 bytes");
  try {
    zmq::socket_t socket(context, zmq::socket_type::rep);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(kZapEndpoint);
    return std::make_unique<ZapHandler>(StartKey{}, std::move(socket), std::move(allowed_client_key));
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(std::string("zap: cannot bind ") + kZapEndpoint + ": " + e.what());
  }
}

ZapHandler::ZapHandler(StartKey, zmq::socket_t socket, std::string allowed_client_key)
    : socket_(std::move(socket)), allowed_(std::move(allowed_client_key)) {
  thread_ = std::thread([this] { Serve(); });
}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  thread_.join();
}

void ZapHandler::Serve() {
  // No signal is for this thread. One that reached it would end its poll with EINTR, which
  // cppzmq throws, and the handler would stop; with no handler, libzmq admits any client that
  // knows the server's public key (ZMQ_ZAP_ENFORCE_DOMAIN is a draft option). Blocked here, a
  // process's signals reach a thread that handles them.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_setname_np(pthread_self(), "psf-zap");  // in top, gdb and perf; set once signals are blocked
  try {
    while (!stop_.load()) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(kPollMs)) > 0) Answer();
    }
  } catch (const zmq::error_t& e) {
    // Only context termination gets here, and the Van stops the handler before that.
    PSF_LOG(Error) << "zap: handler stopped: " << e.what();
  }
  socket_.close();
}

void ZapHandler::Answer() {
  // Request frames: version, request id, domain, address, routing id, mechanism, credentials...
  std::vector<zmq::message_t> request;
  do {
    request.emplace_back();
    if (!socket_.recv(request.back(), zmq::recv_flags::none)) return;
  } while (request.back().more());
  const bool well_formed = request.size() >= 6 && request[0].to_string_view() == "1.0";
  const std::string mechanism = request.size() >= 6 ? request[5].to_string() : "";
  const bool admit =
      well_formed && mechanism == "CURVE" && request.size() == 7 && request[6].to_string_view() == allowed_;
  if (admit) {
    admitted_.fetch_add(1);
  } else {
    const uint64_t n = refused_.fetch_add(1) + 1;
    if (WorthLogging(n)) {
      PSF_LOG(Warning) << "zap: refused a " << (mechanism.empty() ? "malformed" : mechanism) << " client from "
                       << (request.size() >= 4 ? request[3].to_string() : "?") << ": not the job's client key (" << n
                       << " refused so far)";
    }
  }
  // Reply frames: version, request id, status code, status text, user id, metadata.
  const std::string request_id = request.size() >= 2 ? request[1].to_string() : "";
  socket_.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(std::string_view(admit ? "200" : "400")), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(std::string_view(admit ? "OK" : "not a client of this job")), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(std::string_view(admit ? "job-client" : "")), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(std::string_view("")), zmq::send_flags::none);
}

}  // namespace psformer
