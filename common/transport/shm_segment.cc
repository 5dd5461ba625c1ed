#include "common/transport/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/logging.h"
#include "common/process_exists.h"
#include "common/thread_annotations.h"

namespace psformer {

struct ShmSegment::Header {
  char magic[8];
  uint32_t version;
  uint32_t slot_count;
  uint64_t job_id;
  int64_t creator_pid;
  uint64_t data_offset;  // from the start of the segment
  uint64_t capacity;     // bytes of the data area
  uint64_t pid_namespace;  // CurrentPidNamespace() of the creator: creator_pid means a process there
};

struct ShmSegment::SlotEntry {
  uint64_t state;  // generation << 2 | status; only through std::atomic_ref
  uint64_t offset;
  uint64_t size;
  int64_t claimer_pid;  // atomic_ref too: the owner reads it while a receiver may write it
};

namespace {

constexpr char kMagic[8] = {'P', 'S', 'F', 'S', 'E', 'G', '0', '1'};
constexpr uint32_t kVersion = 2;
constexpr uint64_t kAlign = 64;
constexpr uint64_t kPage = 4096;
constexpr uint32_t kMaxSlots = 1 << 16;
constexpr char kShmDir[] = "/dev/shm";

enum Status2 : uint64_t { kFree = 0, kWriting = 1, kSent = 2, kClaimed = 3 };
constexpr uint64_t State(uint64_t generation, uint64_t status) { return generation << 2 | status; }
constexpr uint64_t StatusOf(uint64_t state) { return state & 3; }
constexpr uint64_t GenerationOf(uint64_t state) { return state >> 2; }

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

std::string Errno(int err) { return std::strerror(err); }

// Calls fn(name) for each file in /dev/shm owned by this user whose name is a segment name.
template <typename Fn>
void ForEachOwnSegment(Fn fn) {
  DIR* dir = opendir(kShmDir);
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) names.push_back(std::string("/") + e->d_name);
  closedir(dir);
  for (const std::string& name : names) {
    auto parts = ParseShmSegmentName(name);
    if (!parts) continue;
    struct stat st {};
    if (stat((std::string(kShmDir) + name).c_str(), &st) != 0 || st.st_uid != geteuid()) continue;
    fn(name, *parts);
  }
}

}  // namespace

bool ShmSegmentExists(const std::string& name) {
  struct stat st;
  return stat((std::string(kShmDir) + name).c_str(), &st) == 0;
}

std::string ShmSegmentName(uint64_t job_id, pid_t pid, uint64_t nonce, uint32_t n) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%016" PRIx64 "-%d-%016" PRIx64 "-%u", std::string(kShmNamePrefix).c_str(),
                job_id, static_cast<int>(pid), nonce, n);
  return name;
}

namespace {
struct ProcessNonce {
  Mutex mu;
  pid_t drawn_in PSF_GUARDED_BY(mu) = 0;
  uint64_t value PSF_GUARDED_BY(mu) = 0;
};
}  // namespace

uint64_t ShmProcessNonce() {
  static ProcessNonce nonce;
  MutexLock lock(&nonce.mu);
  if (nonce.drawn_in != getpid()) {
    std::random_device random;
    nonce.value = static_cast<uint64_t>(random()) << 32 | random();
    nonce.drawn_in = getpid();
  }
  return nonce.value;
}

std::string ShmJobPrefix(uint64_t job_id) {
  const std::string name = ShmSegmentName(job_id, 0, 0, 0);
  return name.substr(0, kShmNamePrefix.size() + 17);
}

std::optional<ShmSegmentNameParts> ParseShmSegmentName(std::string_view name) {
  if (name.substr(0, kShmNamePrefix.size()) != kShmNamePrefix) return std::nullopt;
  std::string rest(name.substr(kShmNamePrefix.size()));
  // Exactly 16 hex digits, '-', decimal pid, '-', 16 hex digits, '-', decimal n: nothing else is ours.
  if (rest.size() < 37 || rest[16] != '-') return std::nullopt;
  auto digits = [](const std::string& s, const char* set) {
    return !s.empty() && s.find_first_not_of(set) == std::string::npos;
  };
  const std::string job = rest.substr(0, 16);
  const size_t dash = rest.find('-', 17);
  if (dash == std::string::npos || dash + 18 > rest.size() || rest[dash + 17] != '-') return std::nullopt;
  const std::string pid = rest.substr(17, dash - 17), nonce = rest.substr(dash + 1, 16), n = rest.substr(dash + 18);
  if (!digits(job, "0123456789abcdef") || !digits(pid, "0123456789") || !digits(nonce, "0123456789abcdef") ||
      !digits(n, "0123456789")) {
    return std::nullopt;
  }
  if (pid.size() > 9 || n.size() > 9) return std::nullopt;
  ShmSegmentNameParts parts;
  parts.job_id = std::stoull(job, nullptr, 16);
  parts.pid = static_cast<pid_t>(std::stol(pid));
  parts.nonce = std::stoull(nonce, nullptr, 16);
  parts.n = static_cast<uint32_t>(std::stoul(n));
  return parts;
}

int RemoveShmSegments(std::optional<uint64_t> job_id, std::optional<pid_t> pid) {
  int removed = 0;
  ForEachOwnSegment([&](const std::string& name, const ShmSegmentNameParts& parts) {
    if (job_id && parts.job_id != *job_id) return;
    if (pid && parts.pid != *pid) return;
    if (shm_unlink(name.c_str()) == 0) ++removed;
  });
  return removed;
}

uint64_t CurrentPidNamespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

std::optional<uint64_t> ShmSegmentPidNamespace(const std::string& name) { return ShmSegment::PidNamespaceOf(name); }

std::optional<uint64_t> ShmSegment::PidNamespaceOf(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return std::nullopt;
  Header h{};
  const bool read_all = pread(fd, &h, sizeof(h), 0) == static_cast<ssize_t>(sizeof(h));
  close(fd);
  if (!read_all || std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kVersion) return std::nullopt;
  return h.pid_namespace;
}

int RemoveOrphanShmSegments(std::optional<uint64_t> job_id) {
  int removed = 0;
  const uint64_t here = CurrentPidNamespace();
  ForEachOwnSegment([&](const std::string& name, const ShmSegmentNameParts& parts) {
    if (job_id && parts.job_id != *job_id) return;
    if (ProcessExists(parts.pid)) return;
    // Its pid is dead here; it is an orphan only if it was a pid here.
    const std::optional<uint64_t> made_in = ShmSegmentPidNamespace(name);
    if (!made_in || *made_in != here || here == 0) return;
    if (shm_unlink(name.c_str()) == 0) ++removed;
  });
  return removed;
}

ShmSegment::SlotEntry* ShmSegment::slots() const {
  return reinterpret_cast<SlotEntry*>(base_ + RoundUp(sizeof(Header), kAlign));
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(uint64_t job_id, uint32_t n, uint64_t capacity,
                                                         uint32_t slots) {
  if (slots == 0 || slots > kMaxSlots) return Status::InvalidArgument("shm: slot count out of range");
  const std::string name = ShmSegmentName(job_id, getpid(), ShmProcessNonce(), n);
  const uint64_t data_offset = RoundUp(RoundUp(sizeof(Header), kAlign) + slots * sizeof(SlotEntry), kPage);
  const uint64_t total = data_offset + RoundUp(capacity, kPage);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Status::IoError("shm: cannot create " + name + ": " + Errno(errno));
  auto fail = [&](const std::string& what, int err) {
    close(fd);
    shm_unlink(name.c_str());
    return Status::IoError("shm: cannot " + what + " " + name + " (" + std::to_string(total) +
                           " bytes): " + Errno(err));
  };
  if (fchmod(fd, 0600) != 0) return fail("set the mode of", errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) return fail("stat", errno);
  // Reserve the memory now: tmpfs allocates pages on first touch, and a full /dev/shm would
  // then kill the writer with SIGBUS instead of failing here.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(total)); err != 0) return fail("reserve", err);
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return fail("map", errno);
  close(fd);
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->name_ = name;
  seg->owner_ = true;
  seg->creator_ = getpid();
  seg->device_ = st.st_dev;
  seg->inode_ = st.st_ino;
  seg->base_ = static_cast<uint8_t*>(p);
  seg->mapped_bytes_ = total;
  seg->data_ = seg->base_ + data_offset;
  seg->capacity_ = capacity;
  seg->slot_count_ = slots;
  auto* h = reinterpret_cast<Header*>(seg->base_);
  h->version = kVersion;
  h->slot_count = slots;
  h->job_id = job_id;
  h->creator_pid = seg->creator_;
  h->data_offset = data_offset;
  h->capacity = capacity;
  h->pid_namespace = CurrentPidNamespace();
  std::memcpy(h->magic, kMagic, sizeof(kMagic));  // the slot table is zero: every slot free
  return seg;
}

StatusOr<std::shared_ptr<ShmSegment>> ShmSegment::Open(const std::string& name, uint64_t job_id) {
  auto parts = ParseShmSegmentName(name);
  if (!parts) return Status::InvalidArgument("shared-memory segment name \"" + name + "\" is not a psformer segment");
  if (parts->job_id != job_id) {
    return Status::InvalidArgument("shared-memory segment " + name +
                                   " belongs to another job (this job's segments are " + ShmJobPrefix(job_id) + "*)");
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Status::InvalidArgument("shared-memory segment " + name + " cannot be opened: " + Errno(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 0077) != 0 ||
      static_cast<uint64_t>(st.st_size) < sizeof(Header)) {
    close(fd);
    return Status::InvalidArgument("shared-memory segment " + name +
                                   " is not this user's, is open to others, or is too small to be a segment");
  }
  void* p = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return Status::InvalidArgument("shared-memory segment " + name + " cannot be mapped: " + Errno(errno));
  std::shared_ptr<ShmSegment> seg(new ShmSegment());
  seg->name_ = name;
  seg->device_ = st.st_dev;
  seg->inode_ = st.st_ino;
  seg->base_ = static_cast<uint8_t*>(p);
  seg->mapped_bytes_ = st.st_size;
  Header h;
  std::memcpy(&h, p, sizeof(h));
  const uint64_t table_end = RoundUp(sizeof(Header), kAlign) + static_cast<uint64_t>(h.slot_count) * sizeof(SlotEntry);
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kVersion || h.job_id != job_id ||
      h.creator_pid != parts->pid || h.slot_count == 0 || h.slot_count > kMaxSlots || h.data_offset < table_end ||
      h.data_offset > seg->mapped_bytes_ || h.capacity > seg->mapped_bytes_ - h.data_offset) {
    return Status::InvalidArgument("shared-memory segment " + name +
                                   " has a header that does not match its name or size");
  }
  seg->creator_ = parts->pid;
  seg->data_ = seg->base_ + h.data_offset;
  seg->capacity_ = h.capacity;
  seg->slot_count_ = h.slot_count;
  return seg;
}

bool ShmSegment::StillLinked() const {
  struct stat st {};
  return stat((std::string(kShmDir) + name_).c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_;
}

ShmSegment::~ShmSegment() {
  pin_.reset();  // unregistered while still mapped
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
  if (owner_) shm_unlink(name_.c_str());
}

void ShmSegment::Pin(const std::function<std::shared_ptr<void>(void* data, size_t bytes)>& pin) {
  if (!pin_ && base_ != nullptr) pin_ = pin(base_, mapped_bytes_);
}

bool ShmSegment::PinnedAndHolds(const void* p, size_t n) const {
  const auto* b = static_cast<const uint8_t*>(p);
  return pin_ != nullptr && b >= base_ && n <= mapped_bytes_ && b - base_ <= static_cast<ptrdiff_t>(mapped_bytes_ - n);
}

std::optional<ShmSegment::Slot> ShmSegment::Reserve(uint64_t size) {
  const uint64_t need = RoundUp(std::max<uint64_t>(size, 1), kAlign);
  if (need > capacity_) return std::nullopt;
  std::vector<std::pair<uint64_t, uint64_t>> used;  // [begin, end) of slots not free
  int64_t free_index = -1;
  uint64_t free_state = 0;
  for (uint32_t i = 0; i < slot_count_; ++i) {
    SlotEntry& e = slots()[i];
    const uint64_t s = std::atomic_ref<uint64_t>(e.state).load(std::memory_order_acquire);
    if (StatusOf(s) != kFree) {
      used.emplace_back(e.offset, e.offset + RoundUp(std::max<uint64_t>(e.size, 1), kAlign));
    } else if (free_index < 0) {
      free_index = i;
      free_state = s;
    }
  }
  if (free_index < 0) return std::nullopt;
  std::sort(used.begin(), used.end());
  uint64_t at = 0;
  for (const auto& [begin, end] : used) {
    if (begin >= at + need) break;
    at = std::max(at, end);
  }
  if (at + need > capacity_) return std::nullopt;
  SlotEntry& e = slots()[free_index];
  Slot slot{static_cast<uint32_t>(free_index), GenerationOf(free_state) + 1, at, size};
  // Only the owner moves a slot out of "free", so this cannot race with a receiver.
  std::atomic_ref<uint64_t>(e.state).store(State(slot.generation, kWriting), std::memory_order_relaxed);
  e.offset = slot.offset;
  e.size = slot.size;
  std::atomic_ref<int64_t>(e.claimer_pid).store(0, std::memory_order_relaxed);
  return slot;
}

std::optional<ShmSegment::Slot> ShmSegment::Lend(uint64_t offset, uint64_t size) {
  PSF_CHECK(offset <= capacity_ && size <= capacity_ - offset);
  for (uint32_t i = 0; i < slot_count_; ++i) {
    SlotEntry& e = slots()[i];
    const uint64_t s = std::atomic_ref<uint64_t>(e.state).load(std::memory_order_acquire);
    if (StatusOf(s) != kFree) continue;
    const Slot slot{i, GenerationOf(s) + 1, offset, size};
    std::atomic_ref<uint64_t>(e.state).store(State(slot.generation, kWriting), std::memory_order_relaxed);
    e.offset = offset;
    e.size = size;
    std::atomic_ref<int64_t>(e.claimer_pid).store(0, std::memory_order_relaxed);
    return slot;
  }
  return std::nullopt;
}

void ShmSegment::Publish(const Slot& slot) {
  // Release: the payload and the entry are visible to whoever sees "sent".
  std::atomic_ref<uint64_t>(slots()[slot.index].state).store(State(slot.generation, kSent), std::memory_order_release);
}

void ShmSegment::Unpublish(const Slot& slot) {
  uint64_t expected = State(slot.generation, kSent);
  std::atomic_ref<uint64_t>(slots()[slot.index].state)
      .compare_exchange_strong(expected, State(slot.generation, kFree), std::memory_order_acq_rel);
}

bool ShmSegment::Claimed(const Slot& slot) const {
  const uint64_t s = std::atomic_ref<uint64_t>(slots()[slot.index].state).load(std::memory_order_acquire);
  return s != State(slot.generation, kSent);
}

bool ShmSegment::Released(const Slot& slot) const {
  const uint64_t s = std::atomic_ref<uint64_t>(slots()[slot.index].state).load(std::memory_order_acquire);
  return s != State(slot.generation, kSent) && s != State(slot.generation, kClaimed);
}

int ShmSegment::ReclaimFromDeadReaders() {
  int reclaimed = 0;
  for (uint32_t i = 0; i < slot_count_; ++i) {
    SlotEntry& e = slots()[i];
    uint64_t s = std::atomic_ref<uint64_t>(e.state).load(std::memory_order_acquire);
    const pid_t claimer = static_cast<pid_t>(std::atomic_ref<int64_t>(e.claimer_pid).load(std::memory_order_acquire));
    if (StatusOf(s) != kClaimed || claimer == 0 || ProcessExists(claimer)) continue;
    if (std::atomic_ref<uint64_t>(e.state).compare_exchange_strong(s, State(GenerationOf(s), kFree))) ++reclaimed;
  }
  return reclaimed;
}

StatusOr<const uint8_t*> ShmSegment::Claim(uint32_t slot, uint64_t generation, uint64_t offset, uint64_t size) {
  if (slot >= slot_count_) {
    return Status::InvalidArgument("shared-memory slot " + std::to_string(slot) + " is out of range (segment " + name_ +
                                   " has " + std::to_string(slot_count_) + " slots)");
  }
  SlotEntry& e = slots()[slot];
  uint64_t expected = State(generation, kSent);
  if (!std::atomic_ref<uint64_t>(e.state).compare_exchange_strong(expected, State(generation, kClaimed),
                                                                  std::memory_order_acq_rel)) {
    return Status::InvalidArgument("shared-memory slot " + std::to_string(slot) + " of " + name_ +
                                   " holds no payload of generation " + std::to_string(generation) +
                                   " waiting to be read (a stale, repeated or forged descriptor)");
  }
  if (e.size != size || e.offset != offset || offset > capacity_ || size > capacity_ - offset) {
    const std::string why = "shared-memory descriptor says " + std::to_string(size) + " bytes at offset " +
                            std::to_string(offset) + " but slot " + std::to_string(slot) + " of " + name_ + " holds " +
                            std::to_string(e.size) + " bytes at offset " + std::to_string(e.offset);
    // The slot's payload is not what the message claimed: give it back unread.
    Release(slot, generation);
    return Status::InvalidArgument(why);
  }
  std::atomic_ref<int64_t>(e.claimer_pid).store(getpid(), std::memory_order_release);
  return static_cast<const uint8_t*>(data_ + offset);
}

void ShmSegment::Release(uint32_t slot, uint64_t generation) {
  if (slot >= slot_count_) return;
  uint64_t expected = State(generation, kClaimed);
  std::atomic_ref<uint64_t>(slots()[slot].state)
      .compare_exchange_strong(expected, State(generation, kFree), std::memory_order_acq_rel);
}

}  // namespace psformer
