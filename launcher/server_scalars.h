// ServerScalars: one parameter server's view of the job as TensorBoard scalars, in a directory
// of its own (RUN_DIR/tensorboard/server-K, a run of its own in TensorBoard), read from the
// server's counters (ParameterServerStats) and its Van's traffic (VanTraffic) without touching
// the serving thread.
//
// Sample() is called every few tens of milliseconds. Each time the server's applied step reaches
// a multiple of `every_steps` (logging.every_steps), it writes at that multiple (where the job's
// own scalars are; the figures run up to the sample that saw it, a step or so later at most):
//   server/update_ms         mean time to take a push in (sum, update), since the last point
//   server/bytes_in_per_s    bytes received and sent per second since the last point
//   server/bytes_out_per_s
//   server/pending_pulls     queue depth: the most pulls, and accepted pushes not applied yet,
//   server/pending_pushes    waiting at any sample since the last point
//   refused/REASON           messages refused for REASON ("refused/stale_step") by this process,
//                            each reason once it has refused any
// and a rollback of the shard becomes a text event (tag "events").
//
// Thread safety: one thread calls Sample and Finish; the counters are atomics written elsewhere.
#ifndef PSFORMER_LAUNCHER_SERVER_SCALARS_H_
#define PSFORMER_LAUNCHER_SERVER_SCALARS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/tensorboard/event_writer.h"
#include "common/transport/counting_van.h"
#include "pserver/server/parameter_server.h"

namespace psformer {

struct ServerScalarsOptions {
  std::string dir;        // where the event file goes: RUN_DIR/tensorboard/server-K.
  std::string name;       // "pserver-0": how text events name the server.
  int every_steps = 100;  // a point whenever the applied step reaches a multiple of this (>= 1).
};

class ServerScalars {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens an event file in options.dir (IoError if it cannot). `stats` and `traffic` must outlive
  // this object's use of them (the last Sample or Finish).
  static StatusOr<std::unique_ptr<ServerScalars>> Open(ServerScalarsOptions options, const ParameterServerStats* stats,
                                                       std::shared_ptr<const VanTraffic> traffic);

  // Looks at the counters once; writes a point when the applied step has reached the next
  // multiple of every_steps, and a text event for each new rollback.
  Status Sample(Clock::time_point now = Clock::now());
  // A last point at the applied step, unless one is there already (the job's last step is not
  // always a multiple of every_steps).
  Status Finish(Clock::time_point now = Clock::now());

 private:
  // The counters at the last point.
  struct Baseline {
    Clock::time_point time;
    int64_t step = 0;  // where the point went
    uint64_t update_ns = 0;
    uint64_t updates = 0;
    uint64_t bytes_in = 0;
    uint64_t bytes_out = 0;
  };

  ServerScalars(ServerScalarsOptions options, const ParameterServerStats* stats,
                std::shared_ptr<const VanTraffic> traffic, std::unique_ptr<tensorboard::EventWriter> writer);
  Baseline Now(Clock::time_point now) const;
  Status WritePoint(const Baseline& current);

  ServerScalarsOptions options_;
  const ParameterServerStats* stats_;
  std::shared_ptr<const VanTraffic> traffic_;
  std::unique_ptr<tensorboard::EventWriter> writer_;
  Baseline last_;
  int64_t last_point_step_ = 0;  // never goes back: a rolled-back server's next point comes after it
  uint64_t rollbacks_seen_ = 0;
  uint64_t most_pending_pulls_ = 0;  // since the last point
  uint64_t most_pending_pushes_ = 0;
};

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_SERVER_SCALARS_H_
