#include "common/transport/host_link_board.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace psformer {

// One host group's slot, a cache line of its own. Every process of the host maps the same bytes,
// and a lock-free atomic is the same in all of them.
struct alignas(64) HostLinkBoard::Slot {
  std::atomic<int64_t> step;      // the first of the sums on their way: its step...
  std::atomic<uint64_t> offset;   // ...and where it begins within its shard
  std::atomic<uint64_t> count;    // how many; 0 = none
  std::atomic<int64_t> since_ns;  // steady clock (CLOCK_MONOTONIC: the same in every process) of the last change
};
static_assert(sizeof(std::atomic<int64_t>) * 4 <= 64, "a slot is one cache line");
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the board's slots are shared between processes: their atomics must be lock-free");

namespace {

constexpr int kMaxSlots = 4096;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StatusOr<std::string> HostLinkBoard::PathFor(const std::string& ipc_endpoint) {
  constexpr std::string_view kIpc = "ipc://";
  if (ipc_endpoint.rfind(kIpc, 0) != 0 || ipc_endpoint.size() == kIpc.size()) {
    return Status::InvalidArgument("a host's link board lives beside a server's ipc:// socket, not at \"" +
                                   ipc_endpoint + "\"");
  }
  return ipc_endpoint.substr(kIpc.size()) + ".link";
}

StatusOr<std::shared_ptr<HostLinkBoard>> HostLinkBoard::Open(const std::string& path, int slots) {
  if (slots < 1 || slots > kMaxSlots) {
    return Status::InvalidArgument("host link board " + path + ": " + std::to_string(slots) +
                                   " slots (one per host group) is outside [1, " + std::to_string(kMaxSlots) + "]");
  }
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return Status::IoError("cannot open the host link board " + path + ": " + std::strerror(errno));
  }
  const size_t bytes = sizeof(Slot) * static_cast<size_t>(slots);
  struct stat st {};
  std::string why;
  if (fstat(fd, &st) != 0) {
    why = std::string("fstat: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (static_cast<size_t>(st.st_size) < bytes && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    why = std::string("cannot size it: ") + std::strerror(errno);
  }
  void* map = MAP_FAILED;
  if (why.empty()) {
    map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) why = std::string("mmap: ") + std::strerror(errno);
  }
  close(fd);
  if (!why.empty()) return Status::IoError("host link board " + path + ": " + why);
  return std::shared_ptr<HostLinkBoard>(new HostLinkBoard(map, bytes, slots));
}

HostLinkBoard::HostLinkBoard(void* map, size_t bytes, int slots) : map_(map), bytes_(bytes), slots_(slots) {}

HostLinkBoard::~HostLinkBoard() { munmap(map_, bytes_); }

void HostLinkBoard::Publish(int slot, int64_t step, uint64_t offset, uint64_t count) {
  if (slot < 0 || slot >= slots_) return;
  Slot& s = static_cast<Slot*>(map_)[slot];
  if (count == 0) step = 0, offset = 0;
  if (s.count.load(std::memory_order_relaxed) == count && s.step.load(std::memory_order_relaxed) == step &&
      s.offset.load(std::memory_order_relaxed) == offset) {
    return;
  }
  s.step.store(step, std::memory_order_relaxed);
  s.offset.store(offset, std::memory_order_relaxed);
  s.count.store(count, std::memory_order_relaxed);
  s.since_ns.store(NowNs(), std::memory_order_release);
}

bool HostLinkBoard::SumsPending(int64_t step, uint64_t offset) const {
  const int64_t now = NowNs();
  constexpr int64_t kStaleNs = kStaleMs * 1000 * 1000;
  const Slot* slots = static_cast<const Slot*>(map_);
  for (int i = 0; i < slots_; ++i) {
    const Slot& s = slots[i];
    const int64_t since = s.since_ns.load(std::memory_order_acquire);
    if (s.count.load(std::memory_order_relaxed) == 0 || now - since >= kStaleNs || now < since) continue;
    const int64_t first = s.step.load(std::memory_order_relaxed);
    if (first < step || (first == step && s.offset.load(std::memory_order_relaxed) <= offset)) return true;
  }
  return false;
}

}  // namespace psformer
