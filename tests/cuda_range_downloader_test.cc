// CudaRangeDownloader: ranges copied to the host on the copy stream, while the compute stream goes
// on, must hold bitwise what a synchronous download of the same device memory gives, and come
// back in the order they were started. CudaRangeUploader: parameters uploaded by layers give the
// gradient of a whole upload. Labelled gpu; skipped where no GPU is present.
// Written on a machine without a GPU: these tests have compiled but not yet run on one.
#include "worker/backend/cuda/cuda_range_downloader.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "tests/cuda_test_util.h"
#include "tests/model_test_util.h"
#include "worker/backend/cuda/cuda_range_uploader.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

using testing::RandomBatch;
using testing::RandomParams;
using testing::SmallModel;
using testing::ToDevice;
using testing::ToHost;

constexpr int kVocab = 57;

// The first index where a and b differ in their bits, or -1.
int64_t FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

std::unique_ptr<RangeDownloader> MakeDownloader(CudaBackend* gpu, const DeviceBuffer<float>& device,
                                                std::vector<float>* host) {
  auto made = gpu->MakeRangeDownloader(device.data(), host->data(), host->size());
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? std::move(made).value() : nullptr;
}

bool Pinned(const RangeDownloader& downloader) {
  const auto* cuda = dynamic_cast<const CudaRangeDownloader*>(&downloader);
  return cuda != nullptr && cuda->host_pinned();
}

// gpu_ on device 0 (the fixture's CPU backend goes unused).
class CudaRangeDownloaderTest : public testing::CudaVsCpu {};

// What the worker does: each layer's gradient started as backward reports it, the complete ones
// taken in the report callback, the rest after backward. Two steps on one downloader, so the
// second reuses its events and must overwrite the first's values.
TEST_F(CudaRangeDownloaderTest, GradientCopiedDuringBackwardEqualsASynchronousDownload) {
  for (const bool pre_ln : {false, true}) {
    Transformer<float> model(SmallModel(2, 32, 64, 4, pre_ln, 0.1f), kVocab, gpu_.get());
    std::mt19937_64 rng(pre_ln ? 5 : 4);
    std::vector<float> params;
    for (double p : RandomParams(model.layout(), rng)) params.push_back(static_cast<float>(p * 0.5));
    const size_t n = params.size();
    DeviceBuffer<float> device_params = ToDevice<float>(gpu_.get(), params);
    DeviceBuffer<float> device_grad = gpu_->Allocate<float>(n);
    std::vector<float> host(n, std::numeric_limits<float>::quiet_NaN());
    std::unique_ptr<RangeDownloader> downloader = MakeDownloader(gpu_.get(), device_grad, &host);
    ASSERT_NE(downloader, nullptr);
    EXPECT_TRUE(Pinned(*downloader));
    for (uint32_t step = 1; step <= 2; ++step) {
      const Batch batch = RandomBatch(rng, 5, 9, 11, kVocab);
      // As the worker's data path does: the launching thread starts copies, another waits for them.
      std::vector<ElementRange> reported, complete;
      std::mutex mutex;
      std::condition_variable started_cv;
      size_t started = 0;
      bool backward_done = false;
      std::thread waiter([&] {
        for (size_t taken = 0;; ++taken) {
          {
            std::unique_lock<std::mutex> lock(mutex);
            started_cv.wait(lock, [&] { return taken < started || backward_done; });
            if (taken == started) return;
          }
          complete.push_back(downloader->WaitOldest());
        }
      });
      model.ForwardBackward(device_params.data(), batch, DropoutKey{99, step, 1}, device_grad.data(),
                            [&](uint64_t begin, uint64_t end, const StepStats&) {
                              reported.push_back({begin, end});
                              downloader->Start(begin, end);
                              std::lock_guard<std::mutex> lock(mutex);
                              ++started;
                              started_cv.notify_one();
                            });
      {
        std::lock_guard<std::mutex> lock(mutex);
        backward_done = true;
        started_cv.notify_one();
      }
      waiter.join();
      ASSERT_FALSE(reported.empty());
      EXPECT_TRUE(complete == reported) << "pre_ln " << pre_ln << " step " << step;
      EXPECT_EQ(FirstBitDifference(host, ToHost(device_grad)), -1) << "pre_ln " << pre_ln << " step " << step;
    }
  }
}

// The copy must wait for the kernels issued before Start: each half is written by a long run of
// additions, then started while the other half's additions are still queued behind it.
TEST_F(CudaRangeDownloaderTest, CopyWaitsForTheComputeIssuedBeforeStart) {
  const size_t n = size_t{1} << 22, half = n / 2;
  DeviceBuffer<float> ones = gpu_->Allocate<float>(half);
  gpu_->Fill(half, 1.0f, ones.data());
  DeviceBuffer<float> device = gpu_->Allocate<float>(n);
  std::vector<float> host(n, -1.0f);
  std::unique_ptr<RangeDownloader> downloader = MakeDownloader(gpu_.get(), device, &host);
  ASSERT_NE(downloader, nullptr);
  constexpr int kAdds = 64;
  for (uint64_t begin : {uint64_t{0}, uint64_t{half}}) {
    for (int i = 0; i < kAdds; ++i) gpu_->Accumulate(half, ones.data(), device.data() + begin);
    downloader->Start(begin, begin + half);
  }
  downloader->Start(half, half);  // empty ranges are returned in their place too
  std::vector<ElementRange> complete;
  for (int i = 0; i < 3; ++i) complete.push_back(downloader->WaitOldest());
  EXPECT_TRUE(complete == (std::vector<ElementRange>{{0, half}, {half, n}, {half, half}}));
  EXPECT_EQ(FirstBitDifference(host, std::vector<float>(n, static_cast<float>(kAdds))), -1);
}

// A host array already pinned cannot be registered again (cudaErrorHostMemoryAlreadyRegistered):
// the second downloader falls back to pageable copies, which must give the same bits, and must
// leave no error behind for the next kernel launch check.
TEST_F(CudaRangeDownloaderTest, UnpinnedFallbackCopiesTheSameBits) {
  std::mt19937_64 rng(3);
  const std::vector<float> values = testing::RandomFloats(rng, 10007);
  DeviceBuffer<float> device = ToDevice<float>(gpu_.get(), values);
  std::vector<float> host(values.size(), 0.0f);
  std::unique_ptr<RangeDownloader> pinned = MakeDownloader(gpu_.get(), device, &host);
  ASSERT_NE(pinned, nullptr);
  ASSERT_TRUE(Pinned(*pinned));
  std::unique_ptr<RangeDownloader> pageable = MakeDownloader(gpu_.get(), device, &host);
  ASSERT_NE(pageable, nullptr);
  EXPECT_FALSE(Pinned(*pageable));
  pageable->Start(5000, values.size());
  pageable->Start(0, 5000);
  EXPECT_TRUE(pageable->WaitOldest() == (ElementRange{5000, values.size()}));
  EXPECT_TRUE(pageable->WaitOldest() == (ElementRange{0, 5000}));
  EXPECT_EQ(FirstBitDifference(host, values), -1);
  pageable.reset();  // must not unregister the array the first one pinned
  gpu_->Fill(values.size(), 2.0f, device.data());
  pinned->Start(0, values.size());
  pinned->WaitOldest();
  EXPECT_EQ(FirstBitDifference(host, std::vector<float>(values.size(), 2.0f)), -1);
}

// Destroying a downloader with copies in flight waits for them: the host array holds them after.
TEST_F(CudaRangeDownloaderTest, DestructionWaitsForCopiesInFlight) {
  const size_t n = size_t{1} << 20;
  DeviceBuffer<float> device = gpu_->Allocate<float>(n);
  gpu_->Fill(n, 3.0f, device.data());
  std::vector<float> host(n, 0.0f);
  std::unique_ptr<RangeDownloader> downloader = MakeDownloader(gpu_.get(), device, &host);
  ASSERT_NE(downloader, nullptr);
  downloader->Start(0, n / 3);
  downloader->Start(n / 3, n);
  downloader.reset();
  EXPECT_EQ(FirstBitDifference(host, std::vector<float>(n, 3.0f)), -1);
}

// CudaRangeUploader: the parameters uploaded layer by layer on the upload stream, each awaited
// on the device where forward first reads it, give the gradient of a synchronous upload of them
// all, bit for bit; two steps with other parameters on one uploader, so the second reuses its
// events and overwrites the first's values (the second's copies wait for the first's kernels).
TEST_F(CudaRangeDownloaderTest, ParametersUploadedByLayersGiveTheGradientOfAWholeUpload) {
  Transformer<float> model(SmallModel(2, 32, 64, 4, /*pre_ln=*/true, 0.1f), kVocab, gpu_.get());
  std::mt19937_64 rng(6);
  const size_t n = model.parameter_count();
  std::vector<float> host(n);
  std::shared_ptr<void> pinned = gpu_->PinHostMemory(host.data(), n * sizeof(float));
  EXPECT_NE(pinned, nullptr);
  DeviceBuffer<float> layered_params = gpu_->Allocate<float>(n), grad = gpu_->Allocate<float>(n);
  auto made = gpu_->MakeRangeUploader(host.data(), layered_params.data(), n, sizeof(float));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<RangeUploader> uploader = std::move(made).value();
  std::vector<ElementRange> order;
  for (const auto& [b, e] : model.forward_ranges()) order.push_back({b, e});
  for (uint32_t step = 1; step <= 2; ++step) {
    std::vector<float> params;
    for (double p : RandomParams(model.layout(), rng)) params.push_back(static_cast<float>(p * 0.5));
    const Batch batch = RandomBatch(rng, 5, 9, 11, kVocab);
    DeviceBuffer<float> whole_params = ToDevice<float>(gpu_.get(), params);
    model.ForwardBackward(whole_params.data(), batch, DropoutKey{7, step, 0}, grad.data());
    const std::vector<float> expected = ToHost(grad);
    std::copy(params.begin(), params.end(), host.begin());
    uploader->Start(order);
    model.ForwardBackward(layered_params.data(), batch, DropoutKey{7, step, 0}, grad.data(), nullptr,
                          [&](uint64_t b, uint64_t e) { uploader->Await(b, e); });
    EXPECT_EQ(FirstBitDifference(ToHost(grad), expected), -1) << "step " << step;
  }
}

// The block CRCs a copy records on the GPU (RecordBlockCrcs, crc32c_kernels.cu) are the host's
// Crc32c of the bytes that arrived, fp32 and bf16 arrays alike; a stretch across blocks no copy
// holds whole is unknown alone; a second copy of the same range records the new bytes' CRCs.
TEST_F(CudaRangeDownloaderTest, BlockCrcsRecordedOnTheGpuAreTheHostsCrc32cOfWhatArrived) {
  const size_t n = 40 * 1024 + 123;
  std::mt19937 rng(9);
  std::vector<float> values(n);
  for (float& v : values) v = static_cast<float>(rng() % 100000) * 1e-3f - 50.0f;
  DeviceBuffer<float> device = ToDevice<float>(gpu_.get(), values);
  std::vector<float> host(n, 0.0f);
  std::unique_ptr<RangeDownloader> downloader = MakeDownloader(gpu_.get(), device, &host);
  ASSERT_NE(downloader, nullptr);
  BlockCrcs* crcs = downloader->RecordBlockCrcs();
  ASSERT_NE(crcs, nullptr) << "the GPU's CRCs disagreed with the host's (see the warning)";
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {  // new device values, copied again over the same ranges
      for (float& v : values) v = -v + 1.0f;
      gpu_->CopyToDevice(device.data(), values.data(), n * sizeof(float));
    }
    const std::vector<ElementRange> ranges{{0, 10000}, {10000, 10001}, {10001, n}};
    for (const ElementRange& r : ranges) downloader->Start(r.begin, r.end);
    for (const ElementRange& r : ranges) ASSERT_TRUE(downloader->WaitOldest() == r);
    ASSERT_EQ(FirstBitDifference(host, values), -1);
    for (const ElementRange& r :
         {ElementRange{0, 10000}, ElementRange{17, 9000}, ElementRange{10001, n}, ElementRange{0, n}}) {
      const std::optional<uint32_t> crc = crcs->Crc32cOf(host.data() + r.begin, (r.end - r.begin) * sizeof(float));
      ASSERT_TRUE(crc.has_value()) << r.begin << ".." << r.end;
      EXPECT_EQ(*crc, Crc32c(0, host.data() + r.begin, (r.end - r.begin) * sizeof(float))) << r.begin << ".." << r.end;
    }
    // Block 9 (elements 9216 .. 10240) lies across the three copies.
    EXPECT_FALSE(crcs->Crc32cOf(host.data() + 9200, 1100 * sizeof(float)).has_value());
  }
  // bf16: the rounded array's bytes.
  std::vector<uint16_t> rounded(n);
  for (size_t i = 0; i < n; ++i) rounded[i] = static_cast<uint16_t>(rng());
  DeviceBuffer<uint16_t> device16 = gpu_->Allocate<uint16_t>(n);
  gpu_->CopyToDevice(device16.data(), rounded.data(), n * sizeof(uint16_t));
  std::vector<uint16_t> host16(n, 0);
  auto made = gpu_->MakeBf16RangeDownloader(device16.data(), host16.data(), n);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<RangeDownloader> down16 = std::move(made).value();
  BlockCrcs* crcs16 = down16->RecordBlockCrcs();
  ASSERT_NE(crcs16, nullptr);
  down16->Start(0, n);
  ASSERT_TRUE(down16->WaitOldest() == (ElementRange{0, n}));
  ASSERT_EQ(host16, rounded);
  EXPECT_EQ(crcs16->Crc32cOf(host16.data() + 5, (n - 5) * sizeof(uint16_t)),
            std::optional<uint32_t>(Crc32c(0, host16.data() + 5, (n - 5) * sizeof(uint16_t))));
}

}  // namespace
}  // namespace psformer
