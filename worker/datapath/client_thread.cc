#include "worker/datapath/client_thread.h"

#include <pthread.h>

#include "common/trace.h"

namespace psformer {

ClientThread::ClientThread(std::unique_ptr<PsClient> client, int reply_poll_ms)
    : reply_poll_ms_(reply_poll_ms), client_(std::move(client)), thread_([this] { Loop(); }) {
  PSF_CHECK(client_ != nullptr && reply_poll_ms_ > 0);
}

ClientThread::~ClientThread() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  cv_.notify_one();
  wakeup_.Notify();
  thread_.join();
}

void ClientThread::Post(Command command) {
  {
    MutexLock lock(&mutex_);
    commands_.push_back(std::move(command));
  }
  cv_.notify_one();
  wakeup_.Notify();  // ends the client's wait for replies, if it is in one
}

void ClientThread::Loop() {
  pthread_setname_np(pthread_self(), "psf-client");  // in top, gdb and perf
  client_->WakeWith(&wakeup_);
  while (true) {
    wakeup_.Drain();  // before the queue is looked at: a command queued after that wakes the wait
    Command command;
    {
      MutexLock lock(&mutex_);
      if (commands_.empty() && !stopping_ && client_->has_requests()) {
        // Replies may be coming: take them in, looking at the queue again at least every reply_poll_ms_.
        lock.Unlock();
        const Status taken = [&] {
          const TraceSpan traced("progress");
          return client_->Progress(reply_poll_ms_);
        }();
        if (!taken.ok() && progress_error_.ok()) {
          PSF_LOG(Warning) << "taking in the servers' replies failed: " << taken.message();
          progress_error_ = taken;
        }
        continue;
      }
      while (commands_.empty() && !stopping_) lock.Wait(&cv_);
      if (commands_.empty()) break;  // stopping, and nothing left to run
      command = std::move(commands_.front());
      commands_.pop_front();
    }
    const TraceSpan traced("command");
    command(*client_);
  }
  client_.reset();  // its Van's sockets close on the thread that used them
}

}  // namespace psformer
