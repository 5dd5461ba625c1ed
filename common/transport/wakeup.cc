#include "common/transport/wakeup.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/logging.h"
#include "common/transport/van.h"

namespace psformer {

Wakeup::Wakeup() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) {
    PSF_LOG(Warning) << "cannot make an eventfd (" << std::strerror(errno)
                     << "): waits for replies will hear of other work only when their poll times out";
  }
}

Wakeup::~Wakeup() {
  if (fd_ >= 0) close(fd_);
}

void Wakeup::Notify() {
  if (fd_ < 0) return;
  const uint64_t one = 1;
  // EAGAIN only at a counter of 2^64-2 notifications not drained: readable either way.
  while (write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void Wakeup::Drain() {
  if (fd_ < 0) return;
  uint64_t count = 0;
  while (read(fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

bool Van::Woken() const {
  if (wake_fd_ < 0) return false;
  pollfd p{wake_fd_, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

}  // namespace psformer
