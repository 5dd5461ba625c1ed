// `psformer train` and `psformer translate` with the model on a GPU, as a user runs them (label
// gpu; each test skips with "no CUDA device: ..." where there is none). The operator and model
// tests check the CUDA backend in-process; these check the path around it: the launcher placing a
// worker on a GPU, the worker uploading pulled parameters and downloading gradients every step,
// validation on the device, and decoding with --gpu.
//
// On a machine other than the one that built the tests, point PSFORMER_SOURCE_DIR at a source
// tree and PSFORMER_BINARY at the psformer binary (bench/gpu/run_on_gpu.sh does).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/model_file.h"
#include "common/param_layout.h"
#include "tests/cuda_test_util.h"
#include "tests/decode_test_util.h"
#include "tests/test_util.h"
#include "worker/data/subword_vocabulary.h"

namespace psformer {
namespace {

using testing::MetricValues;
using testing::ReadTextFile;
using testing::RunPsformer;
using testing::TempDir;

// 20 steps of the copy model with a loss line every step; validation twice.
const char kTwentySteps[] =
    " --config configs/copy.pbtxt --set training.max_steps=20 --set training.stop_at_valid_accuracy=0"
    " --set logging.every_steps=1 --set training.valid_every=10 --set checkpoint.every_steps=0";

// fp32 on the GPU and on the CPU: the same batches, the same dropout masks (Philox), the same Adam
// on the servers; only the order of floating-point sums differs, so the losses agree closely.
void ExpectGpuWorkerTracksCpuWorker(const std::string& flags) {
  TempDir dir;
  const std::string fp32 = std::string(kTwentySteps) + " --set cluster.compute_dtype=FP32" + flags;
  auto cpu = RunPsformer("train" + fp32 + " --set cluster.backend=CPU --run-dir " + dir.File("cpu"));
  ASSERT_EQ(cpu.exit_status, 0) << cpu.output;
  auto gpu = RunPsformer("train" + fp32 + " --set cluster.backend=CUDA --run-dir " + dir.File("gpu"));
  ASSERT_EQ(gpu.exit_status, 0) << gpu.output;
  EXPECT_NE(ReadTextFile(dir.File("gpu/logs/worker-0.log")).find("computing on CUDA device"), std::string::npos)
      << "the worker did not say it computes on a GPU";

  const std::vector<double> cpu_loss = MetricValues(dir.File("cpu/metrics.jsonl"), "loss");
  const std::vector<double> gpu_loss = MetricValues(dir.File("gpu/metrics.jsonl"), "loss");
  ASSERT_EQ(cpu_loss.size(), 20u) << ReadTextFile(dir.File("cpu/metrics.jsonl"));
  ASSERT_EQ(gpu_loss.size(), cpu_loss.size()) << ReadTextFile(dir.File("gpu/metrics.jsonl"));
  for (size_t i = 0; i < cpu_loss.size(); ++i) {
    EXPECT_NEAR(gpu_loss[i], cpu_loss[i], 1e-4 * std::abs(cpu_loss[i])) << "step " << i + 1;
  }
  const std::vector<double> cpu_valid = MetricValues(dir.File("cpu/metrics.jsonl"), "valid_loss");
  const std::vector<double> gpu_valid = MetricValues(dir.File("gpu/metrics.jsonl"), "valid_loss");
  ASSERT_EQ(cpu_valid.size(), 2u);
  ASSERT_EQ(gpu_valid.size(), 2u);
  for (size_t i = 0; i < cpu_valid.size(); ++i) EXPECT_NEAR(gpu_valid[i], cpu_valid[i], 1e-4 * cpu_valid[i]);
}

TEST(GpuTraining, Fp32WorkerTracksTheCpuWorkerLossForLoss) {
  PSF_SKIP_WITHOUT_GPU();
  ExpectGpuWorkerTracksCpuWorker("");
}

// The embedding's gradient in two parts: the lookups' rows kept apart on the device, the dense
// part pushed first (cluster.split_embedding), as on the CPU.
TEST(GpuTraining, SplitEmbeddingWorkerTracksTheCpuWorkerLossForLoss) {
  PSF_SKIP_WITHOUT_GPU();
  ExpectGpuWorkerTracksCpuWorker(" --set cluster.split_embedding=true --set cluster.servers=2");
}

// The recipe's mixed precision (bf16 products, fp32 masters on the servers) learns the task.
TEST(GpuTraining, Bf16WorkerLearnsTheCopyTask) {
  PSF_SKIP_WITHOUT_GPU();
  TempDir dir;
  auto r = RunPsformer(
      "train --config configs/copy.pbtxt --set cluster.backend=CUDA --set cluster.compute_dtype=BF16 --run-dir " +
      dir.File("run"));
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(ReadTextFile(dir.File("run/logs/worker-0.log")).find("bf16 matrix products"), std::string::npos);
  const std::vector<double> accuracy = MetricValues(dir.File("run/metrics.jsonl"), "valid_accuracy");
  ASSERT_FALSE(accuracy.empty());
  EXPECT_GE(accuracy.back(), 0.99);
}

// `psformer translate --gpu 0` writes what the CPU writes (a small random model over a BPE
// vocabulary learnt here; greedy and beam 4).
TEST(GpuTranslate, GpuDecodesAsTheCpuDoes) {
  PSF_SKIP_WITHOUT_GPU();
  TempDir dir;
  auto spm = testing::SmallBpeModel();
  ASSERT_TRUE(spm.ok()) << spm.status().ToString();
  const std::string spm_path = dir.Write("spm.model", *spm);
  auto vocabulary = SubwordVocabulary::FromFile(spm_path);
  ASSERT_TRUE(vocabulary.ok());
  ModelFile file;
  file.model = testing::SmallModelConfig(false);
  file.vocab_size = vocabulary->size();
  file.params = testing::RandomParams<float>(ParamLayout(file.model, file.vocab_size), 3, 0.3);
  file.spm_digest = SentencePieceDigest(*spm);  // as a trained model records it: translate warns otherwise
  ASSERT_TRUE(WriteModelFile(dir.File("model.bin"), file).ok());
  const std::string input =
      dir.Write("input.txt", "the word was light\nin the beginning was the word and the word was day\nnight\n");
  for (const char* beam : {"1", "4"}) {
    const std::string common = std::string("translate --beam ") + beam + " --model " + dir.File("model.bin") +
                               " --spm " + spm_path + " < " + input;
    auto on_cpu = RunPsformer(common + " > " + dir.File("cpu.txt"));
    ASSERT_EQ(on_cpu.exit_status, 0) << on_cpu.output;
    auto on_gpu = RunPsformer(common + " --gpu 0 > " + dir.File("gpu.txt"));
    ASSERT_EQ(on_gpu.exit_status, 0) << on_gpu.output;
    const std::string expected = ReadTextFile(dir.File("cpu.txt"));
    EXPECT_EQ(std::count(expected.begin(), expected.end(), '\n'), 3) << expected;
    EXPECT_EQ(ReadTextFile(dir.File("gpu.txt")), expected) << "beam " << beam;
  }
}

}  // namespace
}  // namespace psformer
