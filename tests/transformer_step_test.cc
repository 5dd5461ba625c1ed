// TransformerStep (worker/transformer_step.h): with bf16 gradients on a backend that rounds on its
// device (a GPU), the gradient leaves the device already rounded, and those are the bits the
// client would have made of the fp32 gradient on the host, so a job's wire, sums and weights are
// the same whichever side rounds. The CPU backend, told here that it rounds on its "device",
// runs the very code path the CUDA backend takes; the CUDA kernel shares its rounding function
// (common/bfloat16.h) and is checked by the gpu label.
#include "worker/transformer_step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "common/bfloat16.h"
#include "common/block_crcs.h"
#include "common/config_loader.h"
#include "common/crc32c.h"
#include "common/param_init.h"
#include "common/param_layout.h"
#include "worker/backend/cpu_backend.h"
#include "worker/data/batch_source.h"

namespace psformer {
namespace {

// The CPU backend, taken for one that computes beside the host.
class DeviceRoundingCpuBackend final : public CpuBackend<float> {
 public:
  DeviceRoundingCpuBackend() : CpuBackend<float>(1) {}
  bool rounds_on_device() const override { return true; }
};

// The CPU backend with uploads that land only when awaited: Start fills the started ranges of the
// device array with NaN (all bits set), Await copies the ones it overlaps and notes its range. A
// kernel that read a layer's parameters before its ParamsNeeded would compute from NaN.
class LazyUploadCpuBackend final : public CpuBackend<float> {
 public:
  explicit LazyUploadCpuBackend(bool rounds_on_device) : CpuBackend<float>(1), rounds_(rounds_on_device) {}
  bool rounds_on_device() const override { return rounds_; }
  StatusOr<std::unique_ptr<RangeUploader>> MakeRangeUploader(const void* host, void* device, size_t n,
                                                             size_t element_bytes) override {
    return std::unique_ptr<RangeUploader>(
        std::make_unique<Lazy>(host, device, n, element_bytes, &awaited_, &started_, &awaits_));
  }
  const std::vector<ElementRange>& awaited() const { return awaited_; }
  const std::vector<ElementRange>& started() const { return started_; }  // every copy, in order
  size_t awaits() const { return awaits_.load(); }  // from any thread

 private:
  class Lazy final : public RangeUploader {
   public:
    Lazy(const void* host, void* device, size_t n, size_t bytes, std::vector<ElementRange>* awaited,
         std::vector<ElementRange>* started, std::atomic<size_t>* awaits)
        : host_(static_cast<const char*>(host)),
          device_(static_cast<char*>(device)),
          n_(n),
          bytes_(bytes),
          awaited_(awaited),
          started_(started),
          awaits_(awaits) {}
    void Start(const std::vector<ElementRange>& ranges) override {
      pending_.clear();
      for (const ElementRange& r : ranges) Add(r);
    }
    void Add(ElementRange r) override { AddFrom(r, host_ + r.begin * bytes_); }
    void AddFrom(ElementRange r, const void* src) override {
      ASSERT_LE(r.end, n_);
      pending_.push_back({r, static_cast<const char*>(src)});
      started_->push_back(r);
      std::memset(device_ + r.begin * bytes_, 0xFF, (r.end - r.begin) * bytes_);
    }
    void Await(uint64_t begin, uint64_t end) override {
      awaited_->push_back({begin, end});
      std::erase_if(pending_, [&](const Pending& p) {
        if (p.range.end <= begin || end <= p.range.begin) return false;
        std::memcpy(device_ + p.range.begin * bytes_, p.src, (p.range.end - p.range.begin) * bytes_);
        return true;
      });
      ++*awaits_;
    }
    void Quiesce() override {  // every copy reads its source now, awaited or not
      for (const Pending& p : pending_)
        std::memcpy(device_ + p.range.begin * bytes_, p.src, (p.range.end - p.range.begin) * bytes_);
      pending_.clear();
    }

   private:
    const char* host_;
    char* device_;
    size_t n_, bytes_;
    std::vector<ElementRange>* awaited_;
    std::vector<ElementRange>* started_;
    std::atomic<size_t>* awaits_;
    struct Pending {
      ElementRange range;
      const char* src;
    };
    std::vector<Pending> pending_;
  };
  bool rounds_;
  std::vector<ElementRange> awaited_, started_;
  std::atomic<size_t> awaits_{0};
};

// The CPU backend with copies off the "device" that land only when awaited: Start only notes the
// range, WaitOldest copies it. What Compute's thread read of such a copy's host array before the
// copy was awaited would be the array's old contents.
class LateDownloadCpuBackend final : public CpuBackend<float> {
 public:
  LateDownloadCpuBackend() : CpuBackend<float>(1) {}
  StatusOr<std::unique_ptr<RangeDownloader>> MakeRangeDownloader(const float* device, float* host, size_t n) override {
    return std::unique_ptr<RangeDownloader>(std::make_unique<Late>(device, host, n));
  }

 private:
  class Late final : public RangeDownloader {
   public:
    Late(const float* device, float* host, size_t n) : device_(device), host_(host), n_(n) {}
    void Start(uint64_t begin, uint64_t end) override {
      ASSERT_LE(end, n_);
      started_.push_back({begin, end});
    }
    ElementRange WaitOldest() override {
      const ElementRange r = started_.front();
      started_.pop_front();
      std::copy(device_ + r.begin, device_ + r.end, host_ + r.begin);
      return r;
    }

   private:
    const float* device_;
    float* host_;
    size_t n_;
    std::deque<ElementRange> started_;
  };
};

proto::JobConfig Bf16CopyConfig() {
  auto config = ParseConfigText(R"(
    name: "bf16-step"
    model { layers: 1 d_model: 16 d_ff: 32 heads: 2 max_positions: 32 }
    data { task: COPY copy_vocab_size: 12 copy_min_length: 2 copy_max_length: 7 copy_train_size: 200
           copy_valid_size: 20 }
    batching { src_tokens_per_step: 120 tgt_tokens_per_step: 120 }
    cluster { gradient_dtype: BF16 threads_per_process: 1 }
    training { seed: 9 }
  )",
                                "bf16-step");
  EXPECT_TRUE(config.ok()) << config.status().message();
  FillDefaults(&config.value());
  EXPECT_TRUE(ValidateConfig(*config).ok());
  return *config;
}

std::unique_ptr<TransformerStep> MakeStep(const proto::JobConfig& config, std::unique_ptr<Backend<float>> backend,
                                          int worker = 0) {
  auto source = MakeBatchSource(config);
  EXPECT_TRUE(source.ok()) << source.status().message();
  auto step = TransformerStep::Create(config, worker, std::move(*source), std::move(backend), /*with_bleu=*/false);
  EXPECT_TRUE(step.ok()) << step.status().message();
  std::unique_ptr<TransformerStep> s = std::move(*step);
  const ParamLayout layout(config.model(), s->vocab_size());
  InitParamRange(layout, config.training().seed(), 0, s->parameter_count(), s->params().data());
  return s;
}

TEST(TransformerStep, ABf16GradientRoundedOnTheDeviceIsTheHostsRoundingOfTheFp32One) {
  const proto::JobConfig config = Bf16CopyConfig();
  auto host = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  EXPECT_EQ(host->grad_bf16(), nullptr);  // the CPU backend leaves the rounding to the client
  host->Compute(2, nullptr);
  std::span<const float> fp32 = host->grad();
  std::vector<uint16_t> expected(fp32.size());
  FloatsToBf16(fp32.data(), fp32.size(), expected.data());
  size_t nonzero = 0;
  for (float g : fp32) nonzero += g != 0.0f;
  ASSERT_GT(nonzero, fp32.size() / 2);  // a real gradient, not zeros that any path would match

  // Range by range, as backward reports layers: each range rounded, then copied.
  auto device = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  ASSERT_NE(device->grad_bf16(), nullptr);
  std::vector<ElementRange> reported;
  device->Compute(2, [&](uint64_t b, uint64_t e, const StepStats&) { reported.push_back({b, e}); });
  ASSERT_FALSE(reported.empty());
  for (const ElementRange& r : reported) EXPECT_TRUE(device->gradient_copies().WaitOldest() == r);
  const uint64_t n = device->parameter_count();
  EXPECT_EQ(std::vector<uint16_t>(device->grad_bf16(), device->grad_bf16() + n), expected);

  // The whole gradient at once (no overlap).
  auto whole = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  whole->Compute(2, nullptr);
  EXPECT_EQ(std::vector<uint16_t>(whole->grad_bf16(), whole->grad_bf16() + n), expected);
}

// bf16 parameters uploaded as they came and widened on the device compute what the same values
// widened on the host compute: the step's gradient is the same, bit for bit.
TEST(TransformerStep, Bf16ParametersWidenedOnTheDeviceGiveTheHostsGradient) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_cluster()->set_param_dtype(proto::ClusterConfig::BF16);
  auto device = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  ASSERT_NE(device->params_bf16(), nullptr);
  const uint64_t n = device->parameter_count();
  FloatsToBf16(device->params().data(), n, device->params_bf16());
  std::vector<float> widened(n);
  Bf16ToFloats(device->params_bf16(), n, widened.data());
  std::fill(device->params().begin(), device->params().end(), 0.0f);  // so only the bf16 copy can count
  device->ParamsPulled(0, proto::BFLOAT16);
  device->Compute(3, nullptr);

  auto host = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  EXPECT_EQ(host->params_bf16(), nullptr);  // the client widens for the CPU backend
  host->params() = widened;
  host->ParamsPulled(0, proto::BFLOAT16);
  host->Compute(3, nullptr);
  std::vector<uint16_t> expected(n);
  FloatsToBf16(host->grad().data(), n, expected.data());
  EXPECT_EQ(std::vector<uint16_t>(device->grad_bf16(), device->grad_bf16() + n), expected);
  size_t changed = 0;  // the rounding is real: the widened values are not the fp32 ones
  auto fp32 = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  for (uint64_t i = 0; i < n; ++i) changed += fp32->params()[i] != widened[i];
  EXPECT_GT(changed, n / 2);
}

// A step on the lazily uploading CPU backend beside one on a plain one (device rounding with bf16
// parameters), the same config and initial parameters.
struct LazyAndPlain {
  const LazyUploadCpuBackend* lazy = nullptr;
  std::unique_ptr<TransformerStep> layered, whole;
};
LazyAndPlain MakeLazyAndPlain(const proto::JobConfig& config, bool bf16) {
  LazyAndPlain made;
  auto lazy_backend = std::make_unique<LazyUploadCpuBackend>(bf16);
  made.lazy = lazy_backend.get();
  made.layered = MakeStep(config, std::move(lazy_backend));
  std::unique_ptr<Backend<float>> plain = std::make_unique<CpuBackend<float>>(1);
  if (bf16) plain = std::make_unique<DeviceRoundingCpuBackend>();
  made.whole = MakeStep(config, std::move(plain));
  return made;
}

// `got` is `expected` bit for bit, and more than half of it is not zero.
void ExpectSameGradientBits(std::span<const float> expected, std::span<const float> got) {
  ASSERT_EQ(expected.size(), got.size());
  size_t nonzero = 0, differ = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    nonzero += expected[i] != 0.0f;
    differ += std::memcmp(&expected[i], &got[i], sizeof(float)) != 0;
  }
  EXPECT_GT(nonzero, expected.size() / 2);
  EXPECT_EQ(differ, 0u);
}

// Every layer's parameters are awaited where forward first reads them, in forward order, each
// once, together the whole vector: with uploads that land only then, the step's gradient is the
// one of a whole upload before forward, bit for bit (fp32 parameters, POST_LN; bf16 parameters
// widened on the device, PRE_LN with its final norms).
TEST(TransformerStep, ParametersUploadedLayerByLayerWhereForwardNeedsThemGiveTheSameGradient) {
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 parameters, PRE_LN" : "fp32 parameters, POST_LN");
    proto::JobConfig config = Bf16CopyConfig();
    config.mutable_model()->set_layers(2);
    config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
    if (bf16) {
      config.mutable_cluster()->set_param_dtype(proto::ClusterConfig::BF16);
      config.mutable_model()->set_norm_position(proto::ModelConfig::PRE_LN);
    }
    const LazyAndPlain made = MakeLazyAndPlain(config, bf16);
    const LazyUploadCpuBackend* lazy = made.lazy;
    TransformerStep* layered = made.layered.get();
    TransformerStep* whole = made.whole.get();
    const uint64_t n = layered->parameter_count();
    const proto::DType dtype = bf16 ? proto::BFLOAT16 : proto::FLOAT32;
    for (TransformerStep* s : {layered, whole}) {
      if (bf16) FloatsToBf16(s->params().data(), n, s->params_bf16());
      s->ParamsPulled(0, dtype);
      s->Compute(2, nullptr);
    }
    ExpectSameGradientBits(whole->grad(), layered->grad());

    // In forward order, each range once, covering the vector.
    std::vector<ElementRange> order;
    CpuBackend<float> cpu(1);
    for (const auto& [b, e] : Transformer<float>(config.model(), layered->vocab_size(), &cpu).forward_ranges())
      order.push_back({b, e});
    EXPECT_EQ(lazy->awaited(), order);
    std::vector<ElementRange> sorted = lazy->awaited();
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    uint64_t covered = 0;
    for (const ElementRange& r : sorted) {
      EXPECT_EQ(r.begin, covered);
      covered = r.end;
    }
    EXPECT_EQ(covered, n);
  }
}

// With the pull still landing (cluster.forward_as_pulled), forward reads each layer once that
// layer's pieces are in, not once all are: here each layer lands only after forward has read the
// one before (a forward that waited for the whole pull would stall, and is caught), and the
// parameters are zero until they land; the gradient is bit for bit the one of a step whose
// parameters were all in before it began (fp32, and bf16 widened on the device).
// A step to compute from a pull still landing, beside its reference: `whole` has computed step 2
// from parameters all in place (fp32, or bf16 widened on the device); `arriving`'s are zeroed,
// the pull's values kept in `pulled` (and as bf16) for a test to land.
struct ArrivingAndWhole {
  explicit ArrivingAndWhole(bool bf16) : config(Bf16CopyConfig()), bf16(bf16) {
    config.mutable_model()->set_layers(2);
    config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
    if (bf16) config.mutable_cluster()->set_param_dtype(proto::ClusterConfig::BF16);
    made = MakeLazyAndPlain(config, bf16);
    arriving = made.layered.get();
    whole = made.whole.get();
    n = arriving->parameter_count();
    dtype = bf16 ? proto::BFLOAT16 : proto::FLOAT32;
    if (bf16) FloatsToBf16(whole->params().data(), n, whole->params_bf16());
    whole->ParamsPulled(0, dtype);
    whole->Compute(2, nullptr);
    pulled = arriving->params();
    pulled_bf16.resize(n);
    FloatsToBf16(pulled.data(), n, pulled_bf16.data());
    std::fill(arriving->params().begin(), arriving->params().end(), 0.0f);
    if (bf16) std::fill(arriving->params_bf16(), arriving->params_bf16() + n, uint16_t{0});
  }
  // The pull's [b, e) into arriving's host array, as the client writes a piece.
  void Write(uint64_t b, uint64_t e) {
    if (bf16) {
      std::copy(pulled_bf16.begin() + b, pulled_bf16.begin() + e, arriving->params_bf16() + b);
    } else {
      std::copy(pulled.begin() + b, pulled.begin() + e, arriving->params().begin() + b);
    }
  }

  proto::JobConfig config;
  bool bf16;
  LazyAndPlain made;
  TransformerStep* arriving = nullptr;
  TransformerStep* whole = nullptr;
  uint64_t n = 0;
  proto::DType dtype = proto::FLOAT32;
  std::vector<float> pulled;
  std::vector<uint16_t> pulled_bf16;
};

TEST(TransformerStep, ForwardReadsEachLayerAsItsPiecesLand) {
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 parameters" : "fp32 parameters");
    ArrivingAndWhole s(bf16);
    const LazyUploadCpuBackend* lazy = s.made.lazy;
    TransformerStep* arriving = s.arriving;
    const proto::DType dtype = s.dtype;
    const proto::JobConfig& config = s.config;
    std::vector<ElementRange> order;
    CpuBackend<float> cpu(1);
    for (const auto& [b, e] : Transformer<float>(config.model(), arriving->vocab_size(), &cpu).forward_ranges())
      order.push_back({b, e});
    PullArrival arrival;
    arrival.Reset();
    arriving->ParamsArriving(&arrival, dtype);
    bool stalled = false;
    std::thread lander([&] {
      for (size_t k = 0; k < order.size(); ++k) {
        const ElementRange r = order[k];
        s.Write(r.begin, r.end);
        arrival.Landed(r.begin, r.end);
        // The next layer only once forward has read this one (bounded: 20 s).
        int waited = 0;
        while (lazy->awaits() <= k && waited++ < 20000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        stalled = stalled || lazy->awaits() <= k;
      }
      arrival.Finish({Status::Ok(), 0, 0});
    });
    arriving->Compute(2, nullptr);
    lander.join();
    arriving->ParamsPulled(0, dtype);
    EXPECT_FALSE(stalled) << "forward waited for more than the layer it read next";
    EXPECT_EQ(lazy->awaited(), order);
    ExpectSameGradientBits(s.whole->grad(), arriving->grad());
  }
}

// Pieces the pull left where they came (PsClient::Pull's lend) are uploaded from there, the
// rest from params(): with every other piece lent (pieces of 97 values, which begin and end
// inside layers, in frames of 50), params() is never written where they lie, and the gradient is
// bit for bit the one of a step whose parameters all came into params() (fp32, and bf16 widened
// on the device). Once Compute has returned the step holds none of the lent frames.
TEST(TransformerStep, PiecesLeftWhereTheyCameAreUploadedFromThere) {
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 parameters" : "fp32 parameters");
    ArrivingAndWhole s(bf16);
    TransformerStep* arriving = s.arriving;
    ASSERT_TRUE(arriving->reads_lent_params());
    const uint64_t n = s.n;
    const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
    const char* values =
        bf16 ? reinterpret_cast<const char*>(s.pulled_bf16.data()) : reinterpret_cast<const char*>(s.pulled.data());
    PullArrival arrival;
    arrival.Reset();
    std::vector<std::weak_ptr<const LentParams>> lent;
    std::vector<ElementRange> lent_ranges;
    std::vector<ElementRange> end_to_end;  // lent pieces whose frames lie end to end in memory
    constexpr uint64_t kPiece = 97, kFrame = 50;
    for (uint64_t b = 0, k = 0; b < n; b += kPiece, ++k) {
      const uint64_t e = std::min(n, b + kPiece);
      if (k % 2 == 1) {
        // Each frame a copy of its own, or (every other lent piece) views of one array, as a
        // server's snapshot is lent frame by frame.
        LentParams l{b, elem, {}};
        for (uint64_t f = b; f < e; f += kFrame) {
          const size_t bytes = (std::min(e, f + kFrame) - f) * elem;
          l.frames.push_back(k % 4 == 1 ? Frame::Copy(values + f * elem, bytes)
                                        : Frame::View(values + f * elem, bytes, nullptr));
        }
        if (k % 4 == 3) end_to_end.push_back({b, e});
        auto shared = std::make_shared<const LentParams>(std::move(l));
        lent.push_back(shared);
        lent_ranges.push_back({b, e});
        arrival.Landed(b, e, std::move(shared));
      } else {
        s.Write(b, e);
        arrival.Landed(b, e);
      }
    }
    arrival.Finish({Status::Ok(), 0, 0});
    arriving->ParamsArriving(&arrival, s.dtype);
    arriving->Compute(2, nullptr);
    arriving->ParamsPulled(0, s.dtype);
    ExpectSameGradientBits(s.whole->grad(), arriving->grad());
    for (const ElementRange& r : lent_ranges) {
      for (uint64_t i = r.begin; i < r.end; ++i) {
        ASSERT_EQ(bf16 ? arriving->params_bf16()[i] : arriving->params()[i], 0) << i << " was written";
      }
    }
    arrival.Reset();
    for (const auto& l : lent) EXPECT_TRUE(l.expired()) << "the step still holds a lent piece";
    // Frames that lie end to end went as one copy: no two uploads meet inside such a piece but
    // where a layer ends (each layer's upload is its own).
    std::set<uint64_t> layer_starts;
    CpuBackend<float> cpu(1);
    for (const auto& [b, e] : Transformer<float>(s.config.model(), arriving->vocab_size(), &cpu).forward_ranges())
      layer_starts.insert(b);
    const std::vector<ElementRange>& started = s.made.lazy->started();
    for (size_t i = 1; i < started.size(); ++i) {
      if (started[i - 1].end != started[i].begin || layer_starts.count(started[i].begin)) continue;
      for (const ElementRange& p : end_to_end) {
        EXPECT_FALSE(p.begin < started[i].begin && started[i].begin < p.end)
            << "a copy split at " << started[i].begin << " inside [" << p.begin << ", " << p.end << ")";
      }
    }
  }
}

// A layer larger than a piece (cluster.piece_elements) crosses the bus in parts of at most a
// piece, both ways: with the pull landing, each part's upload is its own copy, in forward order,
// and the gradient is handed to the data path part by part, every element once; the bits are
// those of a step whose layers go whole.
TEST(TransformerStep, ALayerLargerThanAPieceIsCopiedInPartsOfAPiece) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_model()->set_layers(2);
  config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
  proto::JobConfig small = config;
  constexpr uint64_t kPiece = 64;
  small.mutable_cluster()->set_piece_elements(kPiece);
  auto lazy_backend = std::make_unique<LazyUploadCpuBackend>(false);
  const LazyUploadCpuBackend* lazy = lazy_backend.get();
  auto parts = MakeStep(small, std::move(lazy_backend));
  auto whole = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  const uint64_t n = parts->parameter_count();
  whole->ParamsPulled(0, proto::FLOAT32);
  whole->Compute(2, nullptr);

  PullArrival arrival;
  arrival.Reset();
  parts->ParamsArriving(&arrival, proto::FLOAT32);
  arrival.Landed(0, n);
  arrival.Finish({Status::Ok(), 0, 0});
  std::vector<ElementRange> handed;
  parts->Compute(2, [&](uint64_t b, uint64_t e, const StepStats&) { handed.push_back({b, e}); });
  for (size_t i = 0; i < handed.size(); ++i) EXPECT_EQ(parts->gradient_copies().WaitOldest(), handed[i]);
  parts->ParamsPulled(0, proto::FLOAT32);
  ExpectSameGradientBits(whole->grad(), parts->grad());

  // Uploads: in forward order, each layer's parts consecutive, none over a piece, and together
  // every layer once; a layer over a piece (the embedding, each encoder layer) in several.
  std::vector<ElementRange> layers;
  CpuBackend<float> cpu(1);
  for (const auto& [b, e] : Transformer<float>(config.model(), parts->vocab_size(), &cpu).forward_ranges())
    layers.push_back({b, e});
  ASSERT_GT(layers.front().end - layers.front().begin, 2 * kPiece);
  std::vector<ElementRange> expected;
  for (const ElementRange& l : layers) {
    for (uint64_t b = l.begin; b < l.end; b += kPiece) expected.push_back({b, std::min(l.end, b + kPiece)});
  }
  EXPECT_EQ(lazy->started(), expected);
  // Downloads: none over a piece, every element once.
  std::vector<int> copied(n, 0);
  for (const ElementRange& r : handed) {
    EXPECT_LE(r.end - r.begin, kPiece);
    for (uint64_t i = r.begin; i < r.end; ++i) ++copied[i];
  }
  EXPECT_EQ(std::count(copied.begin(), copied.end(), 1), static_cast<std::ptrdiff_t>(n));
  EXPECT_GT(handed.size(), layers.size());
}

// With the embedding's gradient in two parts, the lookups' part is copied off the device after
// backward and awaited by the data path's thread (AwaitLookups), not by Compute's: with copies
// that land only when awaited, lookups() holds nothing of the step until AwaitLookups, and then
// the rows and values a step with immediate copies has when Compute returns, bit for bit.
TEST(TransformerStep, TheLookupsCopyIsAwaitedByTheDataPathNotByCompute) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
  config.mutable_cluster()->set_split_embedding(true);
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).message();
  auto late = MakeStep(config, std::make_unique<LateDownloadCpuBackend>());
  auto immediate = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  for (TransformerStep* s : {late.get(), immediate.get()}) s->ParamsPulled(0, proto::FLOAT32);
  for (const int64_t step : {2, 3}) {
    SCOPED_TRACE("step " + std::to_string(step));
    immediate->Compute(step, nullptr);
    immediate->AwaitLookups();
    int handed_over = 0;
    late->Compute(step, [&](uint64_t, uint64_t, const StepStats&) { ++handed_over; });
    for (int i = 0; i < handed_over; ++i) late->gradient_copies().WaitOldest();
    const StepComputer::Lookups& want = immediate->lookups();
    const StepComputer::Lookups& got = late->lookups();
    ASSERT_GT(want.rows.size(), 0u);
    ASSERT_EQ(got.width, want.width);
    const size_t count = want.rows.size() * want.width;
    ASSERT_EQ(std::vector<int32_t>(got.rows.begin(), got.rows.end()),
              std::vector<int32_t>(want.rows.begin(), want.rows.end()));
    // Before: the host array holds the last step's values (none, the first time), not this one's.
    EXPECT_NE(std::memcmp(got.values, want.values, count * sizeof(float)), 0);
    late->AwaitLookups();
    EXPECT_EQ(std::memcmp(got.values, want.values, count * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(late->grad().data(), immediate->grad().data(), late->parameter_count() * sizeof(float)), 0);
  }
}

// With bf16 gradients on a device that rounds, the lookups' part leaves the device rounded too
// (values_bf16; no fp32 values), as the host's rounding of the fp32 lookups of the same step, and
// into memory it was moved to (the data path's lendable memory), where it is then read.
TEST(TransformerStep, Bf16LookupsAreRoundedOnTheDeviceIntoTheMemoryTheyWereMovedTo) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_cluster()->set_split_embedding(true);
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).message();
  auto host = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  auto device = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  EXPECT_EQ(host->leaving_lookup_bytes(), 2 * device->leaving_lookup_bytes());  // fp32, and bf16
  const size_t bytes = device->leaving_lookup_bytes();
  ASSERT_GT(bytes, 0u);
  std::shared_ptr<void> moved(operator new(bytes), [](void* p) { operator delete(p); });
  ASSERT_TRUE(device->MoveLookupsTo(moved).ok());
  for (TransformerStep* s : {host.get(), device.get()}) s->ParamsPulled(0, proto::FLOAT32);
  for (const int64_t step : {2, 3}) {
    SCOPED_TRACE("step " + std::to_string(step));
    host->Compute(step, nullptr);
    host->AwaitLookups();
    device->Compute(step, nullptr);
    device->AwaitLookups();
    const StepComputer::Lookups& want = host->lookups();
    const StepComputer::Lookups& got = device->lookups();
    ASSERT_GT(want.rows.size(), 0u);
    ASSERT_NE(want.values, nullptr);
    EXPECT_EQ(want.values_bf16, nullptr);
    EXPECT_EQ(got.values, nullptr);
    ASSERT_EQ(got.values_bf16, static_cast<const uint16_t*>(moved.get()));
    ASSERT_EQ(std::vector<int32_t>(got.rows.begin(), got.rows.end()),
              std::vector<int32_t>(want.rows.begin(), want.rows.end()));
    const size_t count = want.rows.size() * want.width;
    std::vector<uint16_t> expected(count);
    FloatsToBf16(want.values, count, expected.data());
    size_t nonzero = 0;
    for (size_t i = 0; i < count; ++i) nonzero += want.values[i] != 0.0f;
    ASSERT_GT(nonzero, count / 2);  // real values, not zeros any path would match
    EXPECT_EQ(std::vector<uint16_t>(got.values_bf16, got.values_bf16 + count), expected);
  }
  EXPECT_TRUE(device->MoveLookupsTo(nullptr).IsInvalidArgument());
}

// Compute writes nothing of the gradient's host arrays before its guard (GuardGradientWrites)
// has returned, and calls it once a step, with and without ranges handed over: the data path
// waits there for the last push's acknowledgements, since the servers and the client's resends
// read those arrays until then.
TEST(TransformerStep, WritesNoGradientBeforeItsGuardReturns) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
  config.mutable_cluster()->set_split_embedding(true);
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).message();
  auto guarded = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  auto reference = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  for (TransformerStep* s : {guarded.get(), reference.get()}) s->ParamsPulled(0, proto::FLOAT32);
  const uint64_t n = guarded->parameter_count();
  std::vector<float> last(n);  // what the last step left in grad()
  std::vector<float> last_lookups;
  int guarded_calls = 0, handed_over = 0;
  guarded->GuardGradientWrites([&] {
    ++guarded_calls;
    EXPECT_EQ(handed_over, 0) << "a range was handed over before the guard";
    EXPECT_EQ(std::memcmp(guarded->grad().data(), last.data(), n * sizeof(float)), 0)
        << "grad() written before the guard";
    const StepComputer::Lookups& l = guarded->lookups();
    if (!last_lookups.empty()) {
      EXPECT_EQ(std::memcmp(l.values, last_lookups.data(), last_lookups.size() * sizeof(float)), 0)
          << "lookups() written before the guard";
    }
  });
  for (const int64_t step : {2, 3, 4}) {
    SCOPED_TRACE("step " + std::to_string(step));
    guarded_calls = handed_over = 0;
    const bool overlapped = step != 3;  // step 3: the whole gradient, copied after Compute
    if (overlapped) {
      guarded->Compute(step, [&](uint64_t, uint64_t, const StepStats&) { ++handed_over; });
      for (int i = 0; i < handed_over; ++i) guarded->gradient_copies().WaitOldest();
    } else {
      guarded->Compute(step, nullptr);
    }
    guarded->AwaitLookups();
    reference->Compute(step, nullptr);
    reference->AwaitLookups();
    EXPECT_EQ(guarded_calls, 1);
    ASSERT_EQ(std::memcmp(guarded->grad().data(), reference->grad().data(), n * sizeof(float)), 0);
    ASSERT_NE(std::memcmp(guarded->grad().data(), last.data(), n * sizeof(float)), 0) << "the step wrote nothing";
    std::memcpy(last.data(), guarded->grad().data(), n * sizeof(float));
    const StepComputer::Lookups& l = guarded->lookups();
    last_lookups.assign(l.values, l.values + l.rows.size() * l.width);
  }
}

// A worker whose share of a step's batch holds no sentence (fewer sentences than workers: the
// last batch of a length bucket on 8 GPUs) computes zeros, and with the pull still landing takes
// in every layer although no forward asks for one (it aborted: "forward read every layer").
TEST(TransformerStep, AnEmptyShareOfTheBatchGivesZerosWhileThePullLands) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
  constexpr int kWorkers = 64;
  config.mutable_cluster()->set_workers(kWorkers);
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).message();
  auto source = MakeBatchSource(config);
  ASSERT_TRUE(source.ok());
  ASSERT_EQ((*source)->TrainBatch(2, kWorkers - 1, kWorkers).sentences, 0);
  ASSERT_GT((*source)->TrainBatch(2, 0, kWorkers).sentences, 0);
  for (const bool overlapped : {false, true}) {
    SCOPED_TRACE(overlapped ? "overlap" : "the whole gradient");
    auto lazy_backend = std::make_unique<LazyUploadCpuBackend>(false);
    const LazyUploadCpuBackend* lazy = lazy_backend.get();
    auto step = MakeStep(config, std::move(lazy_backend), kWorkers - 1);
    const uint64_t n = step->parameter_count();
    PullArrival arrival;
    arrival.Reset();
    step->ParamsArriving(&arrival, proto::FLOAT32);
    arrival.Landed(0, n);
    arrival.Finish({Status::Ok(), 0, 0});
    int handed = 0;
    const StepStats stats = overlapped ? step->Compute(2, [&](uint64_t, uint64_t, const StepStats&) { ++handed; })
                                       : step->Compute(2, nullptr);
    for (int i = 0; i < handed; ++i) step->gradient_copies().WaitOldest();
    step->ParamsPulled(0, proto::FLOAT32);
    EXPECT_EQ(stats.target_tokens, 0);
    EXPECT_EQ(overlapped, handed > 0);
    EXPECT_EQ(std::count(step->grad().begin(), step->grad().end(), 0.0f), static_cast<std::ptrdiff_t>(n));
    uint64_t uploaded = 0;
    for (const ElementRange& r : lazy->started()) uploaded += r.end - r.begin;
    EXPECT_EQ(uploaded, n);
  }
}

// The push's CRCs come from the record the gradient's copies made in the same step: a step that
// copies the whole gradient in pieces (one that injects a fault, or overlap off) records blocks
// that an overlapped step's layer ranges cut in two and so do not record; such a block must not
// keep the earlier step's CRC once the overlapped step has written it.
TEST(TransformerStep, TheGradientsRecordedCrcsAreThoseOfTheStepThatWroteIt) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_model()->set_layers(2);
  config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
  config.mutable_cluster()->set_piece_elements(3000);  // a whole step's chunks: 3000 values each
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).message();
  auto step = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  const BlockCrcs* crcs = step->gradient_crcs();
  ASSERT_NE(crcs, nullptr);
  const size_t bytes = step->parameter_count() * sizeof(float);
  ASSERT_GT(BlockCrcs::Blocks(bytes), 8u);
  const auto* grad = reinterpret_cast<const uint8_t*>(step->grad().data());
  step->ParamsPulled(0, proto::FLOAT32);
  for (const int64_t s : {2, 3, 4}) {
    SCOPED_TRACE("step " + std::to_string(s));
    int handed = 0;
    if (s == 3) {
      step->Compute(s, nullptr);
    } else {
      step->Compute(s, [&](uint64_t, uint64_t, const StepStats&) { ++handed; });
      for (int i = 0; i < handed; ++i) step->gradient_copies().WaitOldest();
    }
    for (size_t b = 0; b < BlockCrcs::Blocks(bytes); ++b) {
      const uint8_t* block = grad + b * kCrcBlockBytes;
      ASSERT_EQ(crcs->Crc32cOf(block, kCrcBlockBytes).value_or(Crc32c(0, block, kCrcBlockBytes)),
                Crc32c(0, block, kCrcBlockBytes))
          << "block " << b;
    }
  }
}

TEST(TransformerStep, AnFp32GradientStaysFp32WhateverTheBackend) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
  auto device = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  EXPECT_EQ(device->grad_bf16(), nullptr);
}

}  // namespace
}  // namespace psformer
