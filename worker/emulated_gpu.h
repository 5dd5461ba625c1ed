// An emulated GPU (cluster.backend EMULATED): a worker's compute stand-in for measuring and testing
// the data plane on machines without GPUs. It does none of the model's arithmetic and reads no
// corpus, but it goes through the worker's data path as a GPU does (worker/datapath/): the
// launching thread only launches, and the device works on its own timeline.
//
// The device: the caller of Step is the launching thread. It launches the parameters' upload and
// the forward third of cluster.emulated_step_ms, sleeps until the forward is done (a real step
// reads its loss then), and launches backward at once: each layer's share of the backward
// two-thirds (in proportion to its size), the output projection's first, then last layer first,
// each with its gradient's download behind it (release_at). Launched work runs in launch order on the device's
// timeline: an item starts when the one before it has ended or when it is launched, whichever is later, so a launching
// thread that falls behind leaves the device idle, as on a GPU. The copies (upload and downloads) run on a copy engine,
// a thread of the emulated GPU, paced at cluster.emulated_copy_gb_per_s; its CPU time is the device's and its DMA's,
// not the launching thread's.
#ifndef PSFORMER_WORKER_EMULATED_GPU_H_
#define PSFORMER_WORKER_EMULATED_GPU_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "common/block_crcs.h"
#include "common/proto/config.pb.h"
#include "worker/backend/range_downloader.h"
#include "worker/datapath/stage_queue.h"
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
  using Clock = std::chrono::steady_clock;
  // REQUIRES: a validated config whose vocabulary size is known without data (model.vocab_size,
  // or the copy task's), 0 <= worker < cluster.workers.
  EmulatedGpu(const proto::JobConfig& config, int worker);
  // Waits for the copies in flight.
  ~EmulatedGpu();
  EmulatedGpu(const EmulatedGpu&) = delete;
  EmulatedGpu& operator=(const EmulatedGpu&) = delete;

  uint64_t parameter_count() const { return n_; }
  // The device's time a step takes: the parameters' upload and cluster.emulated_step_ms.
  double step_seconds() const {
    return std::chrono::duration<double>(step_time_ + CopyTime(n_, upload_bytes_)).count();
  }
  // Whether the next steps upload bf16 parameters (2 bytes each, widened on the device) or fp32.
  void set_upload_bf16(bool bf16) { upload_bytes_ = bf16 ? sizeof(uint16_t) : sizeof(float); }
  // The layers' ranges in the order a step releases them: the reverse of the flat layout, which
  // is the order the Transformer's backward finishes them (decoder layers last to first, then
  // the encoder's, the shared embedding last). Disjoint; together they cover [0, n).
  const std::vector<Range>& ranges() const { return ranges_; }
  // When backward makes each range of ranges() final, as a fraction of backward's time. Each
  // layer's work is its share of the parameters (a matrix product costs in proportion to its
  // weights), and backward begins with the output projection, the shared embedding's: its two
  // products (dE = dlogits^T y, then dy = dlogits E) take the embedding's share between them. So
  // the other layers follow that share, and the embedding's range is final at backward's end (the
  // lookups add to it last); with split_embedding its dense part is final during the first
  // product, by blocks of rows (OutputProjectionBlocks), each at its share of that product.
  const std::vector<double>& release_at() const { return release_at_; }

  // One step from parameters of digest `params_digest` (ParameterDigest, or the pull's) into
  // `grad` (n floats), launched as described above. With `grad_bf16` (n), each range is also
  // rounded to bf16 there, on the device as a GPU worker rounds it (cluster.gradient_dtype BF16),
  // and only that half of the bytes is copied (grad then holds the device's fp32 values).
  // With `ready`, each range is handed to it as soon as its download is launched, and Step
  // returns once backward is launched (the device still at work): copies() says when each range
  // is in grad. Without, Step returns once every range is in grad. Returns the synthetic stats.
  // REQUIRES: nothing reads grad[range] before copies() returned the range.
  // `before_writes`, when set, is called once forward has run and before any range's download
  // is launched (StepComputer::GuardGradientWrites).
  //
  // With `arriving` (the pull still landing: cluster.forward_as_pulled), forward goes layer by
  // layer in the flat vector's order instead: each layer's upload starts once arriving->await
  // has returned for its range (and the previous upload is done), and its share of forward once
  // its upload is done (the embedding's share, the output projection, last); the gradients are
  // keyed by arriving->digest(), asked once forward is launched, and `params_digest` is unused.
  struct Arriving {
    std::function<void(uint64_t begin, uint64_t end)> await;  // returns once [begin, end) has landed
    std::function<uint32_t()> digest;                         // the whole pull's, once it is in
  };
  StepStats Step(int64_t step, uint32_t params_digest, float* grad, uint16_t* grad_bf16 = nullptr,
                 const GradientReady& ready = nullptr, const Arriving* arriving = nullptr,
                 const std::function<void()>& before_writes = nullptr);
  // The gradient's downloads, complete in launch order. Start is the device's own (Step calls it).
  RangeDownloader& copies();
  // From the next Step on, the downloads into `leaving` (`bytes`: the grad, or grad_bf16, that
  // Step is given) record the CRC-32C of each whole block of it that they write, as a GPU's copy
  // records them (RangeDownloader::RecordBlockCrcs), in the returned record, valid for a range
  // once copies() has returned it; the next call's record takes over (the one before stays, as
  // it was, as long as this GPU). REQUIRES: no download in flight.
  BlockCrcs* RecordBlockCrcs(const void* leaving, size_t bytes);
  // With cluster.split_embedding the embedding's range comes first in ranges(), in blocks (the
  // output projection's part, which backward computes first), and each step also looks up these rows:
  // cluster.emulated_lookup_rows of them, spread evenly over the vocabulary, with values made
  // once, copied off the device after backward (CopyLookups).
  const std::vector<int32_t>& lookup_rows() const { return lookup_rows_; }
  const std::vector<float>& lookup_values() const { return lookup_values_; }
  // Launches the copy of the last Step's lookups' values into `to` (lookup_values().size()), or,
  // rounded as the device rounds them, into `to_bf16`, once that Step's backward is done on the
  // device; AwaitLookups returns once it has landed. REQUIRES: the memory outlives the copy.
  void CopyLookups(float* to, uint16_t* to_bf16);
  void AwaitLookups();

 private:
  class CopyEngine;

  uint64_t seed_;
  int worker_;
  Clock::duration step_time_;
  // The time a copy of `elements` of `bytes` each takes at cluster.emulated_copy_gb_per_s.
  Clock::duration CopyTime(uint64_t elements, size_t bytes = sizeof(float)) const {
    return std::chrono::duration_cast<Clock::duration>(seconds_per_byte_ * static_cast<double>(elements * bytes));
  }

  std::chrono::duration<double> seconds_per_byte_;  // at cluster.emulated_copy_gb_per_s
  uint64_t n_ = 0;
  size_t upload_bytes_ = sizeof(float);  // per parameter
  // Forward's end, when forward goes layer by layer as the pull lands (Step's `arriving`).
  Clock::time_point ForwardAsArriving(Clock::time_point now, Clock::duration forward, const Arriving& arriving);

  std::vector<Range> ranges_;
  std::vector<Range> layers_;        // the layers in the flat vector's (forward's) order
  std::vector<double> release_at_;   // (ranges_)
  uint64_t copy_chunk_ = 0;          // the most elements of one copy, either way: a piece's
  StepStats stats_;                  // every step reports the same
  Clock::time_point device_free_{};  // when the device's work launched so far ends
  std::vector<int32_t> lookup_rows_;  // with split_embedding
  std::vector<float> lookup_values_;
  std::unique_ptr<CopyEngine> engine_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_EMULATED_GPU_H_
