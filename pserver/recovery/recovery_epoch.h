// Recovery epochs: how a job that lost a server's updates rolls every shard back to one
// checkpoint without mixing parameters from before and after (docs/failure-model.md).
//
// A restarted server takes a new epoch (TakeRecoveryEpoch: job-wide, only growing) and starts it
// from the newest complete checkpoint. Every PUSH, PULL and CHECKPOINT carries its sender's epoch,
// and a server refuses one of another epoch (RecoveryEpoch::Check), naming its own epoch and the
// step it began at; the client that hears it sends ROLLBACK into that epoch to every shard.
#ifndef PSFORMER_PSERVER_RECOVERY_RECOVERY_EPOCH_H_
#define PSFORMER_PSERVER_RECOVERY_RECOVERY_EPOCH_H_

#include <cstdint>
#include <string>

#include "common/proto/wire.pb.h"
#include "pserver/wire/reject_reason.h"

namespace psformer {

// The epoch a shard serves and the checkpoint step it began at. One thread (the server loop).
class RecoveryEpoch {
 public:
  uint64_t epoch() const { return epoch_; }
  int64_t start_step() const { return start_step_; }  // the checkpoint step epoch() began at.
  void Enter(uint64_t epoch, int64_t start_step) {
    epoch_ = epoch;
    start_step_ = start_step;
  }

  // Refuses (reason "other epoch") a PUSH, PULL or CHECKPOINT of another epoch, and a ROLLBACK
  // into an older one (into this one it is a repeat, into a newer one what recovery needs).
  // Other types are answered in any epoch: HELLO is how a restarted worker learns the epoch.
  Refusal Check(const proto::Header& request) const;

 private:
  uint64_t epoch_ = 0;
  int64_t start_step_ = 0;
};

// A new epoch for a restarted server, larger than every epoch any server of the job took before:
// RUN_DIR/checkpoints/epochs/ holds one empty file per epoch taken, created exclusively, so two
// servers never take the same one. Embedded servers without a run directory (and a run directory
// that cannot be written, logged) get an epoch unique to (shard, incarnation).
uint64_t TakeRecoveryEpoch(const std::string& run_dir, int shard, uint32_t incarnation);

}  // namespace psformer

#endif  // PSFORMER_PSERVER_RECOVERY_RECOVERY_EPOCH_H_
