// Fault injection (config section `fault`): which role process kills or stalls itself when.
// Each event fires once over the run: the k-th event (in step order) aimed at a role fires in
// that role's incarnation k, so a process restarted after a kill at step s does not kill itself
// again when it recomputes step s.
#ifndef PSFORMER_COMMON_FAULT_PLAN_H_
#define PSFORMER_COMMON_FAULT_PLAN_H_

#include <atomic>
#include <cstdint>
#include <memory>
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

// A KILL_IN_SHM armed by a FaultPlan, for the ShmVan (shm_van.h) to carry out in the next payload
// it sends through shared memory.
struct ShmFault {
  enum Point : int32_t {
    kNone,
    kHalfwayThroughCopy,  // workers: SIGKILL with half of the payload copied into the slot (a
                          // payload lent in place: once the receiver has claimed it)
    kOnceAReaderClaims,   // servers: SIGKILL once the receiver has claimed the slot (reads it)
  };
  Point point = kNone;
  int32_t step = 0;  // for the log line
};

// Where a FaultPlan arms a KILL_IN_SHM and the process's ShmVan takes it: one per process, shared
// by the two (FaultPlan::shm_faults, ShmVanOptions::faults). Any thread.
class ShmFaultSwitch {
 public:
  void Arm(ShmFault fault) { armed_.store(fault); }
  // The armed fault, disarming it; nullopt when none is armed.
  std::optional<ShmFault> Take() {
    const ShmFault fault = armed_.exchange(ShmFault{});
    if (fault.point == ShmFault::kNone) return std::nullopt;
    return fault;
  }

 private:
  std::atomic<ShmFault> armed_{ShmFault{}};
};

class FaultPlan {
 public:
  // REQUIRES: a validated config (FaultEvents succeeds). `shm_faults`: where KILL_IN_SHM events
  // are armed (the switch the process's ShmVan was given); null makes one of its own.
  FaultPlan(const proto::FaultConfig& fault, FaultEvent::Role role, int index, uint32_t incarnation,
            std::shared_ptr<ShmFaultSwitch> shm_faults = nullptr);
  // Acts on the events due at `step` for this process: SIGKILLs itself, or SIGSTOPs itself for
  // stall_ms (a forked waker sends SIGCONT), or arms a KILL_IN_SHM in shm_faults().
  void KillOrStallAt(int64_t step) const;
  // Whether KillOrStallAt(step) will kill or stall this process (a worker then holds its push
  // until after).
  bool WillKillOrStallAt(int64_t step) const;
  // Workers, once half of `step`'s gradient is handed over: SIGKILLs itself for a KILL_IN_PUSH;
  // arms a KILL_IN_SHM (as KillOrStallAt does, for a push that starts after computing the step).
  void KillDuringPush(int64_t step) const;
  // Servers, while writing the checkpoint of `step`: SIGKILLs itself for a KILL_IN_CHECKPOINT.
  void KillDuringCheckpoint(int64_t step) const;

  // The switch this plan arms KILL_IN_SHM events in: hand it to the process's ShmVan.
  const std::shared_ptr<ShmFaultSwitch>& shm_faults() const { return shm_faults_; }

 private:
  void ArmShmFault(int64_t step) const;

  FaultEvent::Role role_;
  std::vector<FaultEvent> mine_;  // this incarnation's events
  std::shared_ptr<ShmFaultSwitch> shm_faults_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_FAULT_PLAN_H_
