// An emulated GPU (cluster.backend EMULATED): a worker's compute stand-in for measuring and testing
// the data plane on machines without GPUs. It does none of the model's arithmetic and reads no
// corpus. A step takes cluster.emulated_step_ms of wall time, most of it asleep (the host CPU
// stays as idle as it is beside a GPU): the forward third is waited out, then the gradient is
// released layer by layer, last layer first, over the backward two-thirds, through the same
// GradientReady callback Transformer::ForwardBackward uses.
//
// Gradients are deterministic pseudo-random values (Philox, common/philox.h, keys each block of
// 1024 elements; an integer hash spreads it over the block), a pure function of
// (training.seed, step, worker, layer range, digest of the pulled parameters): a restarted worker
// recomputes exactly what it lost, and a stale or wrong pull changes the gradient, so BSP runs are
// bitwise comparable by `psformer checksum` as real runs are.
//
// Loss and token counts are synthetic: each worker reports its share of
// batching.tgt_tokens_per_step, every token at loss ln(vocab) (a uniform prediction).
#ifndef PSFORMER_WORKER_EMULATED_GPU_H_
#define PSFORMER_WORKER_EMULATED_GPU_H_

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/proto/config.pb.h"
#include "worker/model/transformer.h"

namespace psformer {

// What the gradient of a step depends on besides the element's position.
struct EmulatedGradientKey {
  uint64_t seed = 0;  // training.seed
  uint32_t step = 0;  // 1-based training step (low 32 bits)
  uint32_t worker = 0;
  uint32_t params_digest = 0;  // ParameterDigest of the weights the step computes from
};

// CRC-32C of the n floats' bytes: the digest of a pull that the gradients depend on.
uint32_t ParameterDigest(const float* params, uint64_t n);

// Writes the emulated gradient of elements [begin, end) of the flat vector to grad[begin, end).
// Values are in [-1, 1); element i depends only on (key, range begin, i).
void FillEmulatedGradient(const EmulatedGradientKey& key, uint64_t begin, uint64_t end, float* grad);

class EmulatedGpu {
 public:
  using Range = std::pair<uint64_t, uint64_t>;
  // REQUIRES: a validated config whose vocabulary size is known without data (model.vocab_size,
  // or the copy task's), 0 <= worker < cluster.workers.
  EmulatedGpu(const proto::JobConfig& config, int worker);

  uint64_t parameter_count() const { return n_; }
  // The layers' ranges in the order a step releases them: the reverse of the flat layout, which
  // is the order the Transformer's backward finishes them (decoder layers last to first, then
  // the encoder's, the shared embedding last). Disjoint; together they cover [0, n).
  const std::vector<Range>& ranges() const { return ranges_; }

  // One step from `params` (n floats): sleeps through the forward third, then fills grad (n
  // floats) range by range, each released to `ready` (if set) when its share of the backward
  // two-thirds (in proportion to its size) has passed. Returns the synthetic stats.
  StepStats Step(int64_t step, const float* params, float* grad, const GradientReady& ready = nullptr);

 private:
  uint64_t seed_;
  int worker_;
  std::chrono::microseconds step_time_;
  uint64_t n_ = 0;
  std::vector<Range> ranges_;
  StepStats stats_;  // every step reports the same
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_EMULATED_GPU_H_
