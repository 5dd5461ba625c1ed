// Wakeup: a descriptor one thread makes readable (Notify) to end another's wait in poll, where
// that thread waits on its sockets too (Van::WakeOn): a worker's client thread waits for the
// servers' replies, and hears through it at once of a command queued for it or a pulled piece
// landed, instead of when its poll next times out. An eventfd: notifications before a Drain
// count as one, and one after the waiter's Drain is never lost (the descriptor stays readable).
//
// Thread safety: Notify from any thread; Drain and fd on the waiting thread.
#ifndef PSFORMER_COMMON_TRANSPORT_WAKEUP_H_
#define PSFORMER_COMMON_TRANSPORT_WAKEUP_H_

namespace psformer {

class Wakeup {
 public:
  // Where no eventfd can be made (descriptors run out) it warns, and fd() is -1: nothing wakes
  // early, and waits end when their polls time out, as without one.
  Wakeup();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  void Notify();
  // Makes the descriptor unreadable until the next Notify. Call it before looking for the work,
  // so that work that comes after the look leaves the descriptor readable.
  void Drain();
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_WAKEUP_H_
