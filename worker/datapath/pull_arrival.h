// PullArrival: a pull's parameters as they land, for a step whose forward pass starts before the
// whole pull is in (cluster.forward_as_pulled). The client's thread says which ranges of the
// flat vector have landed in the computer's params() (PsClient::ObserveLandings) and, once the
// pull's Wait has returned, how it ended; the launching thread waits for the ranges forward reads
// next, layer by layer, so that a layer's upload and forward begin as soon as its own pieces are
// in, not when the last piece of the model is.
//
// A pull that fails (a server gone, a rollback) ends every wait at once with its status: forward
// then reads whatever params() holds, and the data path pushes nothing of that step.
//
// A piece the pull left where it came (PsClient::Pull's lend) is reported with its frames: it is
// not in params(), and the computer reads it from there (LentIn); the arrival keeps the frames
// until the next Reset.
//
// Thread safety: Reset, Landed and Finish from one thread (the client's); Await, AwaitAll and
// LentIn from any.
#ifndef PSFORMER_WORKER_DATAPATH_PULL_ARRIVAL_H_
#define PSFORMER_WORKER_DATAPATH_PULL_ARRIVAL_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "pserver/client/pull_landing.h"

namespace psformer {

class PullArrival {
 public:
  // How the pull ended (Finish).
  struct Outcome {
    Status status;
    uint32_t digest = 0;       // PsClient::last_pull_digest
    double first_reply_s = 0;  // PsClient::last_wait_first_reply_s
  };

  // A new pull: nothing landed, not finished.
  void Reset();
  // Elements [begin, end) are in params() (every part of them checked), or, with `lent`, checked
  // where `lent` views them.
  void Landed(uint64_t begin, uint64_t end, std::shared_ptr<const LentParams> lent = nullptr);
  // The pull's Wait returned: with OK every element has landed.
  void Finish(Outcome outcome);

  // Sleeps until every element of [begin, end) has landed or the pull has ended; the pull's
  // failure if it failed, else OK.
  Status Await(uint64_t begin, uint64_t end);
  // Sleeps until the pull has ended, and returns how.
  Outcome AwaitAll();
  // The lent pieces that hold elements of [begin, end) and have landed, in model order.
  std::vector<std::shared_ptr<const LentParams>> LentIn(uint64_t begin, uint64_t end) const;

 private:
  bool Covered(uint64_t begin, uint64_t end) const PSF_REQUIRES(mutex_);

  mutable Mutex mutex_;
  std::condition_variable cv_;
  // Disjoint ranges that have landed, ascending and merged where they touch.
  std::vector<std::pair<uint64_t, uint64_t>> landed_ PSF_GUARDED_BY(mutex_);
  std::optional<Outcome> outcome_ PSF_GUARDED_BY(mutex_);
  // The lent pieces that have landed, by their first element.
  std::map<uint64_t, std::shared_ptr<const LentParams>> lent_ PSF_GUARDED_BY(mutex_);
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATAPATH_PULL_ARRIVAL_H_
