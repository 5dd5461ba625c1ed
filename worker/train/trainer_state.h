// What the local trainer needs to continue exactly where it stopped: the step, the parameters
// and both Adam moments, with the model config and vocabulary size they belong to.
// File (RUN_DIR/trainer_state.bin), little-endian:
//   magic "PSFTRAIN", version (u32 = 1), model config length (u32) + proto::ModelConfig bytes,
//   vocab size (i32), step (i64), count (u64), params, m, v (count x fp32 each),
//   CRC-32C (u32) of every byte before it. Written atomically (temporary file, fsync, rename).
#ifndef PSFORMER_WORKER_TRAIN_TRAINER_STATE_H_
#define PSFORMER_WORKER_TRAIN_TRAINER_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

struct TrainerState {
  proto::ModelConfig model;
  int32_t vocab_size = 0;
  int64_t step = 0;  // steps completed
  std::vector<float> params, adam_m, adam_v;
};

Status WriteTrainerState(const std::string& path, const TrainerState& state);
// Checks magic, version, sizes and CRC; errors name the file and the problem.
StatusOr<TrainerState> ReadTrainerState(const std::string& path);
// Checks magic, version and that the file's size is what its header says, reading the header
// alone (psformer status); not the CRC, which ReadTrainerState checks over the whole file.
Status CheckTrainerStateFile(const std::string& path);

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRAIN_TRAINER_STATE_H_
