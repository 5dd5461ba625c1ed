// What a job will need before it starts: the parameter count and the memory of each role, from
// the config alone, so that a model too large for the machine is refused with the figure instead
// of failing later in an allocation (or in a size computation that wrapped around).
//
// The figures are estimates from below: the buffers each role keeps for the whole run
// (parameters, gradients, Adam moments, message buffers) and the activations one step saves
// for its backward pass at the configured batch. Allocator slack, library workspaces and the
// data pipeline come on top.
#ifndef PSFORMER_COMMON_MEMORY_ESTIMATE_H_
#define PSFORMER_COMMON_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>

#include "common/format_bytes.h"  // FormatBytes, which its users print estimates with
#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

struct MemoryEstimate {
  uint64_t parameters = 0;    // elements of the flat parameter vector (common/param_layout.h)
  uint64_t server_bytes = 0;  // one parameter-server shard (the largest): fp32 params, Adam m and
                              // v, the gradient sum, and (at worst) a push per worker buffered
  // One worker: worker_host_bytes + worker_compute_bytes.
  uint64_t worker_bytes = 0;
  uint64_t worker_host_bytes = 0;        // the pulled parameters and the gradient to push (fp32)
  uint64_t worker_compute_bytes = 0;     // the backend's copies of both plus the activations: host
                                         // memory on the CPU backend, GPU memory on CUDA
  uint64_t worker_activation_bytes = 0;  // what one worker's share of a step saves for backward
  uint64_t local_bytes = 0;              // `train --local`: one process with the whole step and Adam
};

// The parameter count of `model` with `vocab_size` tokens, in closed form (equal to
// ParamLayout(model, vocab_size).total_size()); InvalidArgument if it does not fit 64 bits.
StatusOr<uint64_t> CountParameters(const proto::ModelConfig& model, int vocab_size);

// REQUIRES: the config's sizes are positive (ValidateConfig's first checks). `vocab_size` 0
// (not known before the data is read) leaves the embedding out of the figures.
// InvalidArgument, naming the sizes, when a figure does not fit 64 bits.
StatusOr<MemoryEstimate> EstimateMemory(const proto::JobConfig& config, int vocab_size);

}  // namespace psformer

#endif  // PSFORMER_COMMON_MEMORY_ESTIMATE_H_
