// Fault injection (config section `fault`): which role process kills or stalls itself when.
// Each event fires once over the run: the k-th event (in step order) aimed at a role fires in
// that role's incarnation k, so a process restarted after a kill at step s does not kill itself
// again when it recomputes step s.
#ifndef PSFORMER_COMMON_FAULT_PLAN_H_
#define PSFORMER_COMMON_FAULT_PLAN_H_

#include <cstdint>
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
  // stall_ms (a forked waker sends SIGCONT).
  void At(int64_t step) const;
  // Whether At(step) will kill or stall this process (a worker then holds its push until after).
  bool StrikesAt(int64_t step) const;
  // Workers, once half of `step`'s gradient is handed over: SIGKILLs itself for a KILL_IN_PUSH.
  void DuringPush(int64_t step) const;
  // Servers, while writing the checkpoint of `step`: SIGKILLs itself for a KILL_IN_CHECKPOINT.
  void DuringCheckpoint(int64_t step) const;

 private:
  std::vector<FaultEvent> mine_;  // this incarnation's events
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_FAULT_PLAN_H_
