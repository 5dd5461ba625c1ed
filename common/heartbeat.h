// The role-process side of hang detection (launcher/role_process.h): a thread that writes one
// byte every interval to the pipe named by the environment variable PSFORMER_HEARTBEAT_FD.
// A process stopped by SIGSTOP, or wedged so that this thread cannot run, goes silent and is
// restarted by its supervisor. Without the variable (a role started by hand) it does nothing.
// With each beat it passes on a stop signal that came from another sender than the supervisor
// (common/role_signals.h).
#ifndef PSFORMER_COMMON_HEARTBEAT_H_
#define PSFORMER_COMMON_HEARTBEAT_H_

#include <atomic>
#include <condition_variable>
#include <thread>

#include "common/thread_annotations.h"

namespace psformer {

class HeartbeatSender {
 public:
  explicit HeartbeatSender(int interval_ms);
  ~HeartbeatSender();  // stops the thread.
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  bool active() const { return fd_ >= 0; }

 private:
  void Loop();
  int fd_ = -1;
  int interval_ms_;
  Mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ PSF_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_HEARTBEAT_H_
