// PullLanding: the last stage of a pull on a thread of its own. A pulled piece is copied into the
// caller's parameters with its CRC-32C checked in the same pass (bf16 landing as it came, or
// checked and then widened into fp32), on the landing thread (split over `copy_threads` with
// ParallelFor), while the client's thread goes on: it sends the pushes of the layers backward
// finishes next and takes in the next replies instead of copying. On a GPU worker the client
// thread is the one serial hub between the device and the servers, and copying pieces into place
// was half of its work (bench/RESULTS.md, "On an H100").
//
// The client hands a reply over (Land) and later takes the outcome (TakeLanded): intact, the
// piece is answered; damaged, it is asked for again, as when the copy ran on the client's thread.
// Pieces land in the order given; the destination is written only by the landing thread until
// its outcome has been taken.
//
// A piece may also be left where it came in (Job::lend): its CRC-32C is checked, nothing is
// copied, and the outcome hands its frames on (LentParams) for a computer that reads them where
// they lie, uploading them to its device. On the same host they view the server's snapshot in
// shared memory (shm_van.h), which stays as it is while they live: the parameters then cross
// this host's memory once, from the server's update to the device, as the gradient does.
//
// Thread safety: Land, TakeLanded, WaitForLanded, Quiesce and busy on the client's thread; the
// landing thread is internal.
#ifndef PSFORMER_PSERVER_CLIENT_PULL_LANDING_H_
#define PSFORMER_PSERVER_CLIENT_PULL_LANDING_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "common/transport/wakeup.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

// A pulled piece left where it came in (PullLanding::Job::lend), its CRC-32C checked: the frames
// of its payload, which keep the memory they view (a server's snapshot in shared memory, or the
// transport's buffers) as it was checked for as long as they live.
struct LentParams {
  uint64_t model = 0;         // the piece's first element in the flat vector
  size_t element_bytes = 0;   // 4: fp32; 2: bf16 as it came
  std::vector<Frame> frames;  // the payload in order, each a whole number of elements

  uint64_t size() const {  // elements
    uint64_t n = 0;
    for (const Frame& f : frames) n += f.size() / element_bytes;
    return n;
  }

  // Calls fn(at, bytes, count) for each run of elements of [begin, end) (of the flat vector)
  // that the piece holds, in order: `bytes` holds elements [at, at + count).
  template <typename Fn>
  void ForEachSpan(uint64_t begin, uint64_t end, Fn fn) const {
    const uint64_t b = begin > model ? begin - model : 0;
    if (end <= model || b >= end - model) return;
    ForEachPayloadSpan(frames, element_bytes, b, end - model,
                       [&](const uint8_t* bytes, uint64_t first, uint64_t count) { fn(model + first, bytes, count); });
  }
};

class PullLanding {
 public:
  // Where a piece lands (its first element): fp32 parameters (bf16 on the wire widened on the
  // way) or, for a pull that keeps bf16 as it came, bf16 ones. One of the two is set.
  struct Job {
    uint64_t sequence = 0;  // the reply's: names its request and part
    int64_t step = 0;       // the pull's, and where the piece lies in the model (for the trace)
    uint64_t model = 0;
    WireMessage msg;  // its frames stay alive until the job has landed
    float* params = nullptr;
    uint16_t* params_bf16 = nullptr;
    // A part of a split piece (msg's header says which; gradient_rows.h) is written element run by
    // element run. `piece_crc`: the other part has landed before it, so once this one is in place
    // the CRC-32C of the whole piece, as it travels, is made (Landed::crc32c).
    bool piece_crc = false;
    // A whole piece arriving as its destination keeps it (fp32 for params, bf16 for
    // params_bf16) is only checked, not copied: Landed::lent hands its frames on, and the
    // destination is not written. Any other piece is copied as without it.
    bool lend = false;
  };
  struct Landed {
    uint64_t sequence = 0;
    bool intact = false;  // the payload's CRC-32C matched its header's
    uint32_t crc32c = 0;  // the header's; with Job::piece_crc (and piece_crc), the piece's
    double loss_sum = 0;  // what the header said of the step
    uint64_t target_tokens = 0;
    bool piece_crc = false;
    std::shared_ptr<const LentParams> lent = nullptr;  // intact and lent (Job::lend): where it lies
  };

  explicit PullLanding(int copy_threads);
  // Lets the job being landed finish, drops the ones not begun (nobody waits for them any more,
  // and their destinations may be going too), and ends the thread.
  ~PullLanding();
  PullLanding(const PullLanding&) = delete;
  PullLanding& operator=(const PullLanding&) = delete;

  void Land(Job job);
  // The outcomes of the jobs landed since the last call, in landing order.
  std::vector<Landed> TakeLanded();
  // Whether a job handed over has an outcome not yet taken (landed or not).
  bool busy() const { return handed_ > taken_; }
  // Sleeps until an outcome is ready to take, or `limit` has passed.
  void WaitForLanded(std::chrono::microseconds limit);
  // Waits until every job handed over has landed (its outcome still to take): before the memory
  // they write is given to anything else.
  void Quiesce();
  // From now on each outcome also notifies `wakeup` (the client thread's, which waits in its
  // Van's poll rather than in WaitForLanded); null for none. Before the first Land.
  void NotifyOnLanded(Wakeup* wakeup) {
    MutexLock lock(&mutex_);
    wakeup_ = wakeup;
  }

  // Copies and checks one piece on the calling thread: what the landing thread does with each
  // job.
  static Landed LandNow(const Job& job, int copy_threads);

 private:
  void Loop();

  const int copy_threads_;
  uint64_t handed_ = 0;  // client thread only
  uint64_t taken_ = 0;   // client thread only
  Mutex mutex_;
  std::condition_variable work_cv_, landed_cv_;
  std::deque<Job> jobs_ PSF_GUARDED_BY(mutex_);
  std::vector<Landed> landed_ PSF_GUARDED_BY(mutex_);
  uint64_t landed_count_ PSF_GUARDED_BY(mutex_) = 0;  // jobs landed since creation
  bool closing_ PSF_GUARDED_BY(mutex_) = false;
  Wakeup* wakeup_ PSF_GUARDED_BY(mutex_) = nullptr;
  std::thread thread_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_CLIENT_PULL_LANDING_H_
