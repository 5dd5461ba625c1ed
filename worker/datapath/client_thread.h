// ClientThread: the thread that owns a worker's PsClient (stage kClient of the data path,
// docs/architecture.md "The worker's data path"). The client and its Van are not thread-safe
// (ps_client.h): here exactly one thread ever touches them, and it is not the thread that
// launches the model's kernels. Every other thread reaches the client by command:
//   Post(fn)   queues fn(client) and returns at once (the gradient's pieces, as their copies land);
//   Call(fn)   queues fn(client), sleeps until it has run, and returns its result (pulls, waits,
//              HELLO, rollbacks, the coordinator's reports): whatever fn reads or writes of the
//              caller's state is then safely the caller's again.
// Commands run in the order they were queued. Between commands, while the client has a request
// in flight, the thread takes in replies as they come (PsClient::Progress), so the pieces of a
// pull sent early land in the parameters during backward without anyone waiting for them. It
// waits for replies in its Van's poll, which a queued command and a landed piece also end at
// once (a Wakeup, PsClient::WakeWith): neither waits for the poll to time out.
//
// Thread safety: Post and Call from any thread but the client thread itself (a Call from there
// would wait for itself; it is checked).
#ifndef PSFORMER_WORKER_DATAPATH_CLIENT_THREAD_H_
#define PSFORMER_WORKER_DATAPATH_CLIENT_THREAD_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/logging.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/wakeup.h"
#include "pserver/client/ps_client.h"

namespace psformer {

class ClientThread {
 public:
  using Command = std::function<void(PsClient&)>;

  // How long one wait for replies lasts before the queue is looked at again. A queued command
  // ends the wait at once (a Wakeup); this bounds what a lost wake could cost.
  static constexpr int kReplyPollMs = 1;

  // Starts the thread; it owns `client` from now on. REQUIRES: client != null, reply_poll_ms > 0.
  explicit ClientThread(std::unique_ptr<PsClient> client, int reply_poll_ms = kReplyPollMs);
  // Runs the commands still queued, then stops the thread and destroys the client there.
  ~ClientThread();
  ClientThread(const ClientThread&) = delete;
  ClientThread& operator=(const ClientThread&) = delete;

  void Post(Command command);

  template <typename F>
  std::invoke_result_t<F&, PsClient&> Call(F fn) {
    PSF_CHECK(std::this_thread::get_id() != thread_.get_id());
    using Result = std::invoke_result_t<F&, PsClient&>;
    auto task = std::make_shared<std::packaged_task<Result(PsClient&)>>(std::move(fn));
    std::future<Result> result = task->get_future();
    Post([task](PsClient& client) { (*task)(client); });
    return result.get();
  }

  // The first failure of taking in replies between commands (a transport error), or OK; it is
  // reported once. REQUIRES: called by a command (on the client thread).
  Status TakeProgressError() { return std::exchange(progress_error_, Status::Ok()); }

 private:
  void Loop();

  const int reply_poll_ms_;

  std::unique_ptr<PsClient> client_;  // only the thread touches it
  Wakeup wakeup_;                     // Post notifies; the thread drains (the client polls it)
  Status progress_error_;             // only the thread touches it
  Mutex mutex_;
  std::condition_variable cv_;
  std::deque<Command> commands_ PSF_GUARDED_BY(mutex_);
  bool stopping_ PSF_GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATAPATH_CLIENT_THREAD_H_
