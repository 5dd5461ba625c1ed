#include "common/heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "common/role_signals.h"
#include "common/supervisor_report.h"

namespace psformer {

HeartbeatSender::HeartbeatSender(int interval_ms) : interval_ms_(interval_ms) {
  const char* fd = std::getenv("PSFORMER_HEARTBEAT_FD");
  if (fd == nullptr) return;
  fd_ = std::atoi(fd);
  if (fd_ < 0) return;
  fcntl(fd_, F_SETFL, O_NONBLOCK);  // never block on a supervisor that reads slowly.
  thread_ = std::thread([this] { Loop(); });
}

HeartbeatSender::~HeartbeatSender() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void HeartbeatSender::Loop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    const char beat = 1;
    // A full pipe (supervisor busy) or a closed one (supervisor gone) is not our problem here.
    [[maybe_unused]] ssize_t n = write(fd_, &beat, 1);
    // A stop signal from someone other than the supervisor: the supervisor's to act on.
    if (const std::string signalled = TakeForeignStopSignalReport(); !signalled.empty()) {
      ReportToSupervisor(kReportSignalled, signalled);
    }
    lock.WaitFor(&stop_cv_, std::chrono::milliseconds(interval_ms_));
  }
}

}  // namespace psformer
