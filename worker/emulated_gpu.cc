#include "worker/emulated_gpu.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/bfloat16.h"
#include "common/block_crcs.h"
#include "common/config_loader.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/param_layout.h"
#include "common/philox.h"
#include "common/thread_annotations.h"
#include "pserver/wire/piece_table.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

// Philox for every element would cost one core about 2 s per 63M elements, and even an integer
// hash per element costs a pass of arithmetic (4 cycles an element measured: ~26 ms a step of a
// scaled worker's 20M elements), CPU that a GPU's copy engine does not take from the host. So a
// table of values is made once, and each block of kBlock elements copies kBlock consecutive
// values of it from an offset that one Philox call per block draws: the cost of writing the values.
constexpr uint64_t kBlock = 1024;
constexpr uint64_t kTableValues = 1 << 16;  // 256 KiB: stays in the core's cache

// kTableValues + kBlock values in [-1, 1), each a multiple of 2^-23 (exactly representable).
const std::vector<float>& GradientTable() {
  static const std::vector<float> table = [] {
    std::vector<float> t(kTableValues + kBlock);
    for (uint64_t i = 0; i < t.size(); ++i) {
      // A murmur-style finaliser of the index: every output bit depends on every input bit.
      uint32_t x = static_cast<uint32_t>(i) * 0x9E3779B9u;
      x ^= x >> 16;
      x *= 0x85EBCA6Bu;
      x ^= x >> 13;
      x *= 0xC2B2AE35u;
      x ^= x >> 16;
      // The top 24 bits as a signed integer times 2^-23: in [-1, 1).
      t[i] = static_cast<float>(static_cast<int32_t>(x) >> 8) * (1.0f / 8388608.0f);
    }
    return t;
  }();
  return table;
}

// Elements [from, to) of the emulated gradient of the range that begins at `begin` (FillEmulatedGradient
// writes the whole range; its stretches may be written one after another).
void FillEmulatedStretch(const EmulatedGradientKey& key, uint64_t begin, uint64_t from, uint64_t to, float* grad) {
  const std::vector<float>& table = GradientTable();
  const PhiloxKey philox_key{{key.params_digest, static_cast<uint32_t>(key.seed)}};
  for (uint64_t block = from / kBlock; block * kBlock < to; ++block) {
    // The block's words: counter (block, range begin, step, worker), key (digest, seed).
    const PhiloxCounter words = Philox4x32_10(
        PhiloxCounter{{static_cast<uint32_t>(block), static_cast<uint32_t>(begin), key.step, key.worker}}, philox_key);
    const uint64_t b = std::max(block * kBlock, from), e = std::min(block * kBlock + kBlock, to);
    const float* values = table.data() + words.v[0] % kTableValues + (b - block * kBlock);
    std::copy(values, values + (e - b), grad + b);
  }
}

}  // namespace

uint32_t ParameterDigest(const float* params, uint64_t n) { return Crc32c(0, params, n * sizeof(float)); }

void FillEmulatedGradient(const EmulatedGradientKey& key, uint64_t begin, uint64_t end, float* grad) {
  FillEmulatedStretch(key, begin, begin, end, grad);
}

// The emulated GPU's copy engine: uploads and downloads in launch order, each started when it is
// launched or when the one before it ends, whichever is later, and lasting at least its bytes
// over the copy rate. An upload takes the step's gradient key (the device reads no bytes: the
// pull's digest stands for them); a download writes a range of the gradient.
class EmulatedGpu::CopyEngine final : public RangeDownloader {
 public:
  explicit CopyEngine(const EmulatedGpu* gpu) : gpu_(gpu), thread_([this] { Loop(); }) {}
  ~CopyEngine() override {
    jobs_.Close();
    thread_.join();
  }

  void Upload(const EmulatedGradientKey& key, uint64_t n, size_t bytes, Clock::time_point at) {
    jobs_.Push({true, key, nullptr, nullptr, 0, n, at, bytes});
  }
  // Computes the range into grad and, with grad_bf16, rounds it there (the device's rounding) and
  // copies only that.
  // With a record (Record) of the array the range leaves into, records its whole blocks' CRCs.
  void Download(float* grad, uint16_t* grad_bf16, uint64_t begin, uint64_t end, Clock::time_point at) {
    const void* leaving = grad_bf16 != nullptr ? static_cast<const void*>(grad_bf16) : grad;
    jobs_.Push({false,
                {},
                grad,
                grad_bf16,
                begin,
                end,
                at,
                grad_bf16 != nullptr ? sizeof(uint16_t) : sizeof(float),
                nullptr,
                record_base_ != nullptr && leaving == record_base_ ? records_.back().get() : nullptr});
  }
  // From the next Download on, the CRC-32C of every whole block of `leaving` (`bytes`) that a
  // download into it writes is recorded in the returned record (until the next Record; those
  // made before stay, unchanged, as long as the engine). REQUIRES: the launching thread.
  BlockCrcs* Record(const void* leaving, size_t bytes) {
    records_.push_back(std::make_unique<BlockCrcs>(leaving, bytes));
    record_base_ = leaving;
    return records_.back().get();
  }
  // The lookups' values `from` (n) copied into `to`, or rounded into `to_bf16`, at `at`; counted
  // apart from the gradient's downloads (AwaitLookups).
  void Lookups(const float* from, uint64_t n, float* to, uint16_t* to_bf16, Clock::time_point at) {
    {
      MutexLock lock(&mutex_);
      ++lookups_launched_;
    }
    jobs_.Push({false, {}, to, to_bf16, 0, n, at, to_bf16 != nullptr ? sizeof(uint16_t) : sizeof(float), from});
  }
  // Waits until every Lookups copy launched so far is done.
  void AwaitLookups() {
    MutexLock lock(&mutex_);
    while (lookups_done_ != lookups_launched_) lock.Wait(&complete_cv_);
  }
  // A download launched now into the last step's gradient (Step launches its own with times).
  void Start(uint64_t begin, uint64_t end) override { Download(last_grad_, last_grad_bf16_, begin, end, Clock::now()); }
  ElementRange WaitOldest() override {
    MutexLock lock(&mutex_);
    while (complete_.empty()) lock.Wait(&complete_cv_);
    const ElementRange oldest = complete_.front();
    complete_.pop_front();
    return oldest;
  }
  void set_last_grad(float* grad, uint16_t* grad_bf16) {
    last_grad_ = grad;
    last_grad_bf16_ = grad_bf16;
  }

 private:
  struct Job {
    bool upload = false;
    EmulatedGradientKey key;  // upload: the step's
    float* grad = nullptr;
    uint16_t* grad_bf16 = nullptr;
    uint64_t begin = 0, end = 0;  // upload: [0, n)
    Clock::time_point at;
    size_t bytes = sizeof(float);  // per element copied
    const float* from = nullptr;   // a Lookups copy: its values (into grad or grad_bf16 [0, end))
    BlockCrcs* crcs = nullptr;     // a download's: where its blocks' CRCs go, or null
  };

  // Writes a download's range into grad (and its bf16 rounding into grad_bf16, where the range
  // leaves so) and, with a record, the CRC of each whole block of the array it leaves into, a
  // group of blocks at a time right after writing them, while they are in the core's cache: a
  // copy that checksums what it copies, as a GPU worker's does (CudaRangeDownloader).
  void Write(const Job& job) {
    const auto write = [&](uint64_t from, uint64_t to) {
      if (to <= from) return;
      FillEmulatedStretch(key_, job.begin, from, to, job.grad);
      if (job.grad_bf16 != nullptr) FloatsToBf16(job.grad + from, to - from, job.grad_bf16 + from);
    };
    if (job.crcs == nullptr) return write(job.begin, job.end);
    job.crcs->WriteAndRecord(job.begin * job.bytes, job.end * job.bytes,
                             [&](size_t from, size_t to) { write(from / job.bytes, to / job.bytes); });
  }

  void Loop() {
    pthread_setname_np(pthread_self(), "psf-emu-dma");
    while (std::optional<Job> job = jobs_.Pop()) {
      std::this_thread::sleep_until(job->at);
      const Clock::time_point start = Clock::now();
      if (job->upload) {
        key_ = job->key;
      } else if (job->from != nullptr) {  // the lookups' values, made once
        if (job->grad_bf16 != nullptr) {
          FloatsToBf16(job->from, job->end, job->grad_bf16);
        } else {
          std::copy(job->from, job->from + job->end, job->grad);
        }
      } else {
        Write(*job);
      }
      std::this_thread::sleep_until(start + gpu_->CopyTime(job->end - job->begin, job->bytes));
      if (job->upload) continue;
      {
        MutexLock lock(&mutex_);
        if (job->from != nullptr) {
          ++lookups_done_;
        } else {
          complete_.push_back({job->begin, job->end});
        }
      }
      complete_cv_.notify_all();
    }
  }

  const EmulatedGpu* gpu_;      // its copy rate
  float* last_grad_ = nullptr;  // the launching thread's
  uint16_t* last_grad_bf16_ = nullptr;
  EmulatedGradientKey key_;  // the engine thread's: the last upload's
  // Record's (the launching thread's; the engine writes the entries of a download's record)
  std::vector<std::unique_ptr<BlockCrcs>> records_;     // the last is the current one
  const void* record_base_ = nullptr;                   // (null: none yet)
  StageQueue<Job> jobs_;
  Mutex mutex_;
  std::condition_variable complete_cv_;
  std::deque<ElementRange> complete_ PSF_GUARDED_BY(mutex_);  // downloads done, not yet returned
  uint64_t lookups_launched_ PSF_GUARDED_BY(mutex_) = 0;
  uint64_t lookups_done_ PSF_GUARDED_BY(mutex_) = 0;
  std::thread thread_;                 // last: starts once the rest is built
};

EmulatedGpu::EmulatedGpu(const proto::JobConfig& config, int worker)
    : seed_(config.training().seed()),
      worker_(worker),
      step_time_(std::chrono::milliseconds(config.cluster().emulated_step_ms())),
      seconds_per_byte_(1 / (1e9 * config.cluster().emulated_copy_gb_per_s())),
      copy_chunk_(JobPieceElements(config)) {
  const int vocab = ResolvedVocabSize(config);
  PSF_CHECK(vocab > 0);
  const ParamLayout layout(config.model(), vocab);
  n_ = layout.total_size();
  const std::vector<uint64_t> starts = layout.LayerStarts();
  for (size_t l = 0; l < starts.size(); ++l) ranges_.push_back({starts[l], l + 1 < starts.size() ? starts[l + 1] : n_});
  layers_ = ranges_;
  std::reverse(ranges_.begin(), ranges_.end());
  if (config.cluster().split_embedding() && ranges_.size() > 1) {
    std::rotate(ranges_.begin(), ranges_.end() - 1, ranges_.end());  // the embedding's, first
    const uint64_t width = static_cast<uint64_t>(config.model().d_model());
    const int rows = config.cluster().emulated_lookup_rows() > 0
                         ? std::min(config.cluster().emulated_lookup_rows(), vocab)
                         : std::max(1, vocab / 4);
    for (int r = 0; r < rows; ++r) {
      lookup_rows_.push_back(static_cast<int32_t>(static_cast<int64_t>(r) * vocab / rows));
    }
    lookup_values_.resize(lookup_rows_.size() * width);
    FillEmulatedGradient({seed_, 0, static_cast<uint32_t>(worker), 0}, 0, lookup_values_.size(), lookup_values_.data());
  }
  // The output projection's products first (the embedding's share), then each layer's share.
  const uint64_t embedding = starts.size() > 1 ? starts[1] : n_;
  const uint64_t width = static_cast<uint64_t>(config.model().d_model());
  uint64_t done = ranges_.size() > 1 ? embedding : 0;
  std::vector<Range> released;  // ranges_ as released, the split embedding's in blocks
  for (const Range& range : ranges_) {
    if (range.first == 0 && ranges_.size() > 1) {
      if (lookup_rows_.empty()) {  // final at the end, once the lookups have added to it
        released.push_back(range);
        release_at_.push_back(1.0);
        continue;
      }
      // Split: its dense part through the first of the two products, block by block of rows as
      // the Transformer makes it, each final at its share of that product.
      for (const auto& [first, last] : OutputProjectionBlocks(vocab, config.cluster().output_projection_blocks())) {
        released.push_back({first * width, last * width});
        release_at_.push_back(static_cast<double>(embedding / 2) * last / vocab / static_cast<double>(n_));
      }
      continue;
    }
    done += range.second - range.first;
    released.push_back(range);
    release_at_.push_back(static_cast<double>(done) / n_);
  }
  // Each copied off in parts of at most a piece, as TransformerStep copies them (the parts of a
  // range final at once leave one after another on the copy engine).
  ranges_.clear();
  std::vector<double> release_at;
  for (size_t i = 0; i < released.size(); ++i) {
    for (const ElementRange& c : InChunks({released[i].first, released[i].second}, copy_chunk_)) {
      ranges_.push_back({c.begin, c.end});
      release_at.push_back(release_at_[i]);
    }
  }
  release_at_ = std::move(release_at);
  const int workers = std::max(1, config.cluster().workers());
  const int64_t total = config.batching().tgt_tokens_per_step();
  stats_.target_tokens = total / workers + (worker < total % workers ? 1 : 0);
  stats_.loss_sum = static_cast<double>(stats_.target_tokens) * std::log(static_cast<double>(vocab));
  engine_ = std::make_unique<CopyEngine>(this);
}

EmulatedGpu::~EmulatedGpu() = default;

RangeDownloader& EmulatedGpu::copies() { return *engine_; }

BlockCrcs* EmulatedGpu::RecordBlockCrcs(const void* leaving, size_t bytes) { return engine_->Record(leaving, bytes); }

StepStats EmulatedGpu::Step(int64_t step, uint32_t params_digest, float* grad, uint16_t* grad_bf16,
                            const GradientReady& ready, const Arriving* arriving,
                            const std::function<void()>& before_writes) {
  const Clock::time_point now = Clock::now();
  engine_->set_last_grad(grad, grad_bf16);
  const auto forward = step_time_ / 3;
  const auto backward = step_time_ - forward;
  Clock::time_point forward_end;
  if (arriving == nullptr) {
    // The upload, then the forward, on the device's timeline.
    engine_->Upload({seed_, static_cast<uint32_t>(step), static_cast<uint32_t>(worker_), params_digest}, n_,
                    upload_bytes_, now);
    forward_end = std::max(now, device_free_) + CopyTime(n_, upload_bytes_) + forward;
  } else {
    forward_end = ForwardAsArriving(now, forward, *arriving);
    // The gradients' key, for the downloads behind it (the uploads were timed above).
    engine_->Upload({seed_, static_cast<uint32_t>(step), static_cast<uint32_t>(worker_), arriving->digest()}, 0,
                    upload_bytes_, now);
  }
  std::this_thread::sleep_until(forward_end);  // the loss, read after forward
  if (before_writes) {
    before_writes();
    forward_end = std::max(forward_end, Clock::now());  // backward waited for it: a device would idle too
  }
  // Backward, launched at once: each range's download starts when the device has computed it.
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const Range& range = ranges_[i];
    const auto share = std::chrono::duration_cast<Clock::duration>(backward * release_at_[i]);
    engine_->Download(grad, grad_bf16, range.first, range.second, forward_end + share);
    if (ready) ready(range.first, range.second, stats_);
  }
  device_free_ = forward_end + backward;
  if (!ready) {
    for (size_t i = 0; i < ranges_.size(); ++i) engine_->WaitOldest();
  }
  return stats_;
}

void EmulatedGpu::CopyLookups(float* to, uint16_t* to_bf16) {
  if (lookup_values_.empty()) return;
  engine_->Lookups(lookup_values_.data(), lookup_values_.size(), to, to_bf16, device_free_);
}

void EmulatedGpu::AwaitLookups() { engine_->AwaitLookups(); }

EmulatedGpu::Clock::time_point EmulatedGpu::ForwardAsArriving(Clock::time_point now, Clock::duration forward,
                                                              const Arriving& arriving) {
  // Uploads one after another, each once its part of a layer has landed; a layer's forward once
  // its uploads and the layer before are done. The embedding is read first (the lookups, cheap) and computes
  // last (the output projection, its share).
  Clock::time_point uploaded = std::max(now, device_free_);
  Clock::time_point computed = uploaded;
  const auto share = [&](const Range& r) {
    return std::chrono::duration_cast<Clock::duration>(forward * (static_cast<double>(r.second - r.first) / n_));
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Range& r = layers_[l];
    for (const ElementRange& c : InChunks({r.first, r.second}, copy_chunk_)) {  // as TransformerStep's
      arriving.await(c.begin, c.end);
      uploaded = std::max(uploaded, Clock::now()) + CopyTime(c.end - c.begin, upload_bytes_);
    }
    const bool embedding = l == 0 && layers_.size() > 1;
    computed = std::max(computed, uploaded) + (embedding ? Clock::duration::zero() : share(r));
  }
  return layers_.size() > 1 ? computed + share(layers_[0]) : computed;
}

}  // namespace psformer
