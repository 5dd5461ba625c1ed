// Fault injection (config section `fault`): which role process kills or stalls itself when.
// Each event fires once over the run: the k-th event (in step order) aimed at a role fires in
// that role's incarnation k, so a process restarted after a kill at step s does not kill itself
// again when it recomputes step s.
#ifndef PSFORMER_COMMON_FAULT_PLAN_H_
#define PSFORMER_COMMON_FAULT_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

using FaultEvent = proto::FaultConfig::Event;

// fault.events plus the events of fault.kill ("worker:1@10,server:0@25"); errors name the
// malformed entry.
StatusOr<std::vector<FaultEvent>> FaultEvents(const proto::FaultConfig& fault);

// fault.restart_environment as NAME=VALUE entries; errors name the malformed entry.
StatusOr<std::vector<std::string>> RestartEnvironment(const proto::FaultConfig& fault);

class FaultPlan {
 public:
  // REQUIRES: a validated config (FaultEvents succeeds).
  FaultPlan(const proto::FaultConfig& fault, FaultEvent::Role role, int index, uint32_t incarnation);
  // Acts on the events due at `step` for this process: SIGKILLs itself, or SIGSTOPs itself for
  // stall_ms (a forked waker sends SIGCONT), or arms a KILL_IN_SHM (TakeArmedShmFault).
  void At(int64_t step) const;
  // Whether At(step) will kill or stall this process (a worker then holds its push until after).
  bool StrikesAt(int64_t step) const;
  // Workers, once half of `step`'s gradient is handed over: SIGKILLs itself for a KILL_IN_PUSH;
  // arms a KILL_IN_SHM (as At does, for a push that starts after computing the step).
  void DuringPush(int64_t step) const;
  // Servers, while writing the checkpoint of `step`: SIGKILLs itself for a KILL_IN_CHECKPOINT.
  void DuringCheckpoint(int64_t step) const;

 private:
  void ArmShmFault(int64_t step) const;

  FaultEvent::Role role_;
  std::vector<FaultEvent> mine_;  // this incarnation's events
};

// A KILL_IN_SHM armed by At or DuringPush, for the ShmVan (shm_van.h) to carry out in the next
// payload it sends through shared memory.
struct ShmFault {
  enum Point : int32_t {
    kNone,
    kHalfwayThroughCopy,  // workers: SIGKILL with half of the payload copied into the slot
    kOnceAReaderClaims,   // servers: SIGKILL once the receiver has claimed the slot (reads it)
  };
  Point point = kNone;
  int32_t step = 0;  // for the log line
};
// The armed fault, disarming it; nullopt when none is armed. Any thread.
std::optional<ShmFault> TakeArmedShmFault();

}  // namespace psformer

#endif  // PSFORMER_COMMON_FAULT_PLAN_H_
