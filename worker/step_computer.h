// StepComputer: what a worker computes a training step with, one interface with two kinds
// (docs/architecture.md), so that the worker loop (worker_loop.cc) never asks which it has:
//   TransformerStep (transformer_step.h)  the paper's Transformer on a backend (CPU or CUDA), over
//                                         this worker's share of the step's batch; validates.
//   EmulatedStep (emulated_step.h)        an emulated GPU (cluster.backend EMULATED): the step's
//                                         time asleep, pseudo-random gradients; nothing to validate.
// A computer owns the host copies of the parameters (pulled into params()) and of the gradient
// (pushed from grad(), or from grad_bf16() when it leaves the device rounded), so that a backend
// may pin them as its copies need (the CUDA backend pins both: its copies are DMA, asynchronous).
// The gradient's array may be moved into memory its pusher's transport lends to same-host servers
// in place (MoveGradientTo): then its bytes cross host memory once, by the copy off the device.
//
// Thread safety: one thread, the worker loop's (the launching thread), except gradient_copies()'s
// WaitOldest, which the data path's kDeviceToHost stage calls (worker/datapath/).
#ifndef PSFORMER_WORKER_STEP_COMPUTER_H_
#define PSFORMER_WORKER_STEP_COMPUTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/block_crcs.h"
#include "common/proto/config.pb.h"
#include "common/proto/wire.pb.h"
#include "common/status.h"
#include "worker/datapath/pull_arrival.h"
#include "worker/model/transformer.h"
#include "worker/validation.h"

namespace psformer {

// Elements [begin, end) of the gradient are final on the device and their copy into grad() has
// been started (gradient_copies() says when it is complete); `stats` are the step's (known before
// backward starts). Ranges come last layer first, disjoint. The callback runs on the launching
// thread between kernel launches: it may queue work, never do it.
using GradientCopying = std::function<void(uint64_t begin, uint64_t end, const StepStats& stats)>;

// A host array of n elements whose memory may be exchanged for memory from elsewhere (a
// transport's lendable memory): zeroed heap memory until then.
template <typename T>
class HostArray {
 public:
  HostArray() = default;
  explicit HostArray(size_t n)
      : memory_(new T[n](), [](void* p) { delete[] static_cast<T*>(p); }), data_(static_cast<T*>(memory_.get())), n_(n) {}
  // Holds `memory` (at least n * sizeof(T) bytes, aligned for T) instead; the contents are not
  // kept. Returns the memory held before, for the caller to let go of once nothing refers to it
  // (a device's registration of it, say).
  [[nodiscard]] std::shared_ptr<void> Adopt(std::shared_ptr<void> memory) {
    std::swap(memory_, memory);
    data_ = static_cast<T*>(memory_.get());
    return memory;
  }
  T* data() const { return data_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  std::shared_ptr<void> memory_;
  T* data_ = nullptr;
  size_t n_ = 0;
};

class StepComputer {
 public:
  virtual ~StepComputer() = default;

  // Elements of the flat parameter vector, and the vocabulary the model was sized for.
  uint64_t parameter_count() const { return params_.size(); }
  virtual int vocab_size() const = 0;

  // Forward and backward of this worker's batch of `step` (1-based) from params() into grad().
  // With `on_copying`, each layer's range is handed to it as soon as its copy into grad() has
  // started, while backward goes on; every range has been handed over when Compute returns (their
  // copies may still be in flight). Without, grad() holds the whole gradient on return.
  virtual StepStats Compute(int64_t step, const GradientCopying& on_copying = nullptr) = 0;
  // The copies Compute starts with `on_copying`, in start order (RangeDownloader::WaitOldest).
  virtual RangeDownloader& gradient_copies() = 0;
  // The CRC-32Cs its copies record of the leaving gradient's blocks (RangeDownloader::
  // RecordBlockCrcs: a GPU's, computed on the device), for the client to send the push with
  // instead of reading it again; null when none are recorded. Valid as long as this computer,
  // once the data path has placed the gradient (MoveGradientTo).
  virtual const BlockCrcs* gradient_crcs() const { return nullptr; }

  // The device's time on the last Compute's forward and backward (Backend::SpanSeconds; the
  // emulated GPU's step): may wait for that work to finish, so ask once its gradient is handed over.
  virtual double last_device_s() = 0;

  // The parameters just pulled, with this digest (PsClient::last_pull_digest: what an emulated
  // GPU keys its gradients with instead of reading them) and as `dtype`: FLOAT32 in params(),
  // BFLOAT16 in params_bf16() when there is one (else widened into params() by the client).
  virtual void ParamsPulled(uint32_t /*digest*/, proto::DType dtype) {
    pulled_dtype_ = dtype;
    arrival_ = nullptr;
  }
  // Whether Compute can begin while the pull is still landing (ParamsArriving).
  virtual bool computes_as_pulled() const { return false; }
  // Whether such a Compute reads the pieces the arrival reports lent (PullArrival::LentIn) where
  // they lie, so that the pull need not copy them into params() (PsClient::Pull's lend).
  virtual bool reads_lent_params() const { return false; }
  // Where it reads them only from memory registered with its device's driver (a GPU's DMA): what
  // registers a peer's shared memory, and returns what unregisters it (null where it could not),
  // callable on any thread. Null: it reads any host memory.
  virtual std::function<std::shared_ptr<void>(void* host, size_t bytes)> peer_memory_pinner() { return nullptr; }
  // Instead of ParamsPulled before Compute: the next Compute's parameters are landing in
  // params() (or params_bf16()) as `dtype`, and `arrival` says which have landed; its forward
  // reads each layer once its range has (PullArrival::Await) and, where it needs the digest,
  // waits for the whole pull. ParamsPulled follows once Compute has returned. REQUIRES:
  // computes_as_pulled(); `arrival` outlives that Compute.
  void ParamsArriving(PullArrival* arrival, proto::DType dtype) {
    pulled_dtype_ = dtype;
    arrival_ = arrival;
  }

  // Whether Validate measures anything (an emulated GPU has no model to validate).
  virtual bool validates() const = 0;
  // Validation of the weights in params(): loss, accuracy and, when this computer was made with
  // validation BLEU, BLEU, whose translations go to `hypotheses`. REQUIRES: validates().
  virtual StatusOr<ValidationResult> Validate(std::vector<std::string>* hypotheses) = 0;
  // The references validation BLEU scores against; null when it is not computed here.
  virtual const std::vector<std::string>* bleu_references() const = 0;

  std::vector<float>& params() { return params_; }  // (parameter_count): what a step computes from
  std::span<const float> grad() const { return {grad_.data(), grad_.size()}; }  // (parameter_count): the last step's
  // The last step's gradient rounded to bf16 on the device, when it leaves the device so
  // (cluster.gradient_dtype BF16 on a device that rounds: Backend::rounds_on_device; the emulated
  // GPU): Compute's copies then fill this instead of grad(), with half the bytes, and the client
  // sends it as it is. Null otherwise: the client rounds grad() on its own threads.
  const uint16_t* grad_bf16() const { return grad_bf16_.empty() ? nullptr : grad_bf16_.data(); }
  // Where bf16 parameters land as they came (cluster.param_dtype BF16 on a device that widens
  // them itself: Backend::rounds_on_device; the emulated GPU): the next Compute uploads half the
  // bytes and widens them on the device. Null otherwise: the client widens them into params().
  uint16_t* params_bf16() { return params_bf16_.empty() ? nullptr : params_bf16_.data(); }

  // With cluster.split_embedding (a job whose pieces include split ones): the lookups' part of
  // the last Compute's embedding gradient, which grad()'s embedding range then leaves out (it
  // holds the output projection's part, handed over first): the embedding's rows the batch looked
  // up, ascending, and their gradient (rows.size() x width), in host memory, complete once
  // AwaitLookups has returned and unchanged until the next Compute: in `values`, or, when the
  // gradient leaves the device rounded (grad_bf16()), rounded there too, in `values_bf16` (the
  // other null). Without the split, no rows.
  struct Lookups {
    std::span<const int32_t> rows;
    const float* values = nullptr;
    uint64_t width = 0;
    const uint16_t* values_bf16 = nullptr;
  };
  const Lookups& lookups() const { return lookups_; }
  // Waits until lookups() holds the last Compute's values. Their copy off the device begins
  // when backward ends, and is awaited here rather than in Compute, so that the thread launching
  // the device's work never waits for backward (the data path waits on its client thread, just
  // before it pushes them). Called once per Compute, after it, on any one thread.
  virtual void AwaitLookups() {}
  // The rows the step being computed looks up (values null), known once its first gradient range
  // is handed over (GradientCopying), or once Compute returns, and unchanged until the next
  // Compute: the data path names them with the embedding's dense part (PsClient::NameRows) so
  // that servers update every other row before the lookups' part arrives. Without the split, none.
  const Lookups& named_rows() const { return named_rows_; }

  // The bytes of the array the gradient leaves the device into: grad_bf16() when there is one,
  // else grad().
  size_t leaving_gradient_bytes() const {
    return grad_bf16_.empty() ? grad_.size() * sizeof(float) : grad_bf16_.size() * sizeof(uint16_t);
  }
  // Makes `memory` (leaving_gradient_bytes() long, 64-byte aligned) that array from now on: the
  // data path hands over memory its transport lends to same-host servers in place
  // (PsClient::AllocatePushMemory). Fails as the computer's copies cannot be aimed at it.
  // REQUIRES: no Compute in flight, no copy of a gradient still to be waited for.
  Status MoveGradientTo(std::shared_ptr<void> memory);
  // The bytes of the array the lookups' values leave the device into (room for every row); 0
  // without the split embedding.
  size_t leaving_lookup_bytes() const {
    return lookup_values_bf16_.empty() ? lookup_values_.size() * sizeof(float)
                                       : lookup_values_bf16_.size() * sizeof(uint16_t);
  }
  // As MoveGradientTo, for that array (leaving_lookup_bytes() long): the lookups' values, too,
  // then cross host memory once, by their copy off the device.
  Status MoveLookupsTo(std::shared_ptr<void> memory);
  // What Compute calls before its first write into grad(), grad_bf16() or lookups() (after
  // forward, before backward's first copy off the device): the data path returns from it once
  // nothing reads the last step's push from them any more (WorkerDataPath::SettlePush), since a
  // step's push is acknowledged while the next step's forward runs. Unset, nothing is awaited.
  void GuardGradientWrites(std::function<void()> guard) { gradient_guard_ = std::move(guard); }

 protected:
  explicit StepComputer(uint64_t parameter_count) : params_(parameter_count, 0.0f), grad_(parameter_count) {}

  // Compute's wait before it writes the gradient's host arrays (GuardGradientWrites).
  void AwaitGradientMemory() const {
    if (gradient_guard_) gradient_guard_();
  }
  // Makes grad_bf16() the gradient's way off the device.
  void GradientLeavesAsBf16() { grad_bf16_ = HostArray<uint16_t>(params_.size()); }
  // MoveGradientTo has moved the leaving array: copies aimed at the old one aim at the new.
  virtual Status GradientMoved() { return Status::Ok(); }
  // Makes room for `n` lookup values leaving the device (split embedding): rounded to bf16 when
  // the gradient leaves so (after GradientLeavesAsBf16), else fp32.
  void MakeLookupArray(size_t n) {
    if (grad_bf16_.empty()) {
      lookup_values_ = HostArray<float>(n);
    } else {
      lookup_values_bf16_ = HostArray<uint16_t>(n);
    }
  }
  // MoveLookupsTo has moved the lookups' array: copies aimed at the old one aim at the new.
  virtual Status LookupsMoved() { return Status::Ok(); }
  // Makes params_bf16() where bf16 pulls land.
  void ParamsArriveAsBf16() { params_bf16_.assign(params_.size(), 0); }
  // Whether the last pull left the parameters in params_bf16_ (else in params_).
  bool pulled_bf16() const { return pulled_dtype_ == proto::BFLOAT16 && !params_bf16_.empty(); }

  std::vector<float> params_;          // host, (n)
  HostArray<float> grad_;              // host, (n)
  HostArray<uint16_t> grad_bf16_;      // host, (n) or empty
  HostArray<float> lookup_values_;     // host, room for every row's lookups, or empty...
  HostArray<uint16_t> lookup_values_bf16_;  // ...or this, rounded (MakeLookupArray)
  std::vector<uint16_t> params_bf16_;  // host, (n) or empty
  proto::DType pulled_dtype_ = proto::FLOAT32;
  PullArrival* arrival_ = nullptr;  // the pull landing while the next Compute runs, or null
  Lookups lookups_;
  Lookups named_rows_;
  std::function<void()> gradient_guard_;
};

// The computer `config` asks for, for worker `worker`: EmulatedStep for cluster.backend EMULATED,
// else TransformerStep on the backend MakeWorkerBackend picks (`gpu` -1: the CPU). `with_bleu`:
// validation BLEU is computed too (training.valid_bleu_sentences > 0). Fails as the backend, the
// corpus or the SentencePiece model fail to open.
StatusOr<std::unique_ptr<StepComputer>> MakeStepComputer(const proto::JobConfig& config, int worker, int gpu,
                                                         bool with_bleu);

}  // namespace psformer

#endif  // PSFORMER_WORKER_STEP_COMPUTER_H_
