// The OpenBLAS kernels psformer chooses (worker/backend/blas_kernel_choice.h): the best set for a
// CPU's features, when the library's own choice is kept, and every bad OPENBLAS_CORETYPE refused
// with a message, never a crash. The last tests run psformer itself with the variables set.
#include "worker/backend/blas_kernel_choice.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/decode_test_util.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

CpuFeatures Sse3() {
  CpuFeatures f;
  f.sse3 = f.ssse3 = f.sse4_1 = f.sse4_2 = true;
  return f;
}

CpuFeatures Avx() {
  CpuFeatures f = Sse3();
  f.avx = true;
  return f;
}

CpuFeatures Avx2Fma() {
  CpuFeatures f = Avx();
  f.avx2 = f.fma = true;
  return f;
}

CpuFeatures Avx512() {
  CpuFeatures f = Avx2Fma();
  f.avx512 = true;
  return f;
}

TEST(BlasKernelChoice, TheBestSetFollowsTheFeatures) {
  EXPECT_EQ(BestKernelsFor(CpuFeatures{}), "Prescott");
  EXPECT_EQ(BestKernelsFor(Sse3()), "Prescott");
  EXPECT_EQ(BestKernelsFor(Avx()), "Sandybridge");
  CpuFeatures avx2_without_fma = Avx();
  avx2_without_fma.avx2 = true;
  EXPECT_EQ(BestKernelsFor(avx2_without_fma), "Sandybridge");
  EXPECT_EQ(BestKernelsFor(Avx2Fma()), "Haswell");
  EXPECT_EQ(BestKernelsFor(Avx512()), "SkylakeX");
  CpuFeatures bf16 = Avx512();
  bf16.avx512_bf16 = true;
  EXPECT_EQ(BestKernelsFor(bf16), "SkylakeX");  // Cooperlake adds only bf16 products
  EXPECT_EQ(DescribeFeatures(Avx2Fma()), "AVX2 + FMA");
  EXPECT_EQ(DescribeFeatures(bf16), "AVX-512 + BF16");
}

TEST(BlasKernelChoice, KernelSetsAreFoundByAnyCaseAndKnowWhatTheyNeed) {
  auto zen = FindKernelSet("ZEN", Avx2Fma());
  ASSERT_TRUE(zen.has_value());
  EXPECT_EQ(zen->name, "Zen");
  EXPECT_TRUE(zen->runnable);
  EXPECT_FALSE(FindKernelSet("Zen", Avx())->runnable);
  EXPECT_FALSE(FindKernelSet("SkylakeX", Avx2Fma())->runnable);
  EXPECT_TRUE(FindKernelSet("skylakex", Avx512())->runnable);
  EXPECT_FALSE(FindKernelSet("Cooperlake", Avx512())->runnable);  // no BF16
  EXPECT_FALSE(FindKernelSet("Bulldozer", Avx2Fma())->runnable);  // FMA4, AMD's alone
  EXPECT_TRUE(FindKernelSet("Prescott", Avx512())->runnable);
  EXPECT_FALSE(FindKernelSet("Skylake", Avx512()).has_value());
}

TEST(BlasKernelChoice, AnOlderLibraryChoiceIsReplacedByTheFeatures) {
  // Debian 12's OpenBLAS on a recent Xeon: it does not know the CPU and runs Prescott.
  auto choice = ChooseBlasKernels("Prescott", Avx512(), std::nullopt, std::nullopt);
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_EQ(choice->reexec_with, "SkylakeX");
  EXPECT_NE(choice->reason.find("Prescott"), std::string::npos) << choice->reason;
  choice = ChooseBlasKernels("Haswell", Avx512(), std::nullopt, std::nullopt);
  EXPECT_EQ(choice->reexec_with, "SkylakeX");
  choice = ChooseBlasKernels("Sandybridge", Avx2Fma(), std::nullopt, std::nullopt);
  EXPECT_EQ(choice->reexec_with, "Haswell");
  choice = ChooseBlasKernels("Unknown", Avx2Fma(), std::nullopt, std::nullopt);
  EXPECT_EQ(choice->reexec_with, "Haswell");
}

TEST(BlasKernelChoice, TheLibrarysChoiceStaysWhereItIsAsNew) {
  for (const auto& [library, features] :
       {std::pair{"Zen", Avx2Fma()}, std::pair{"Haswell", Avx2Fma()}, std::pair{"SkylakeX", Avx512()},
        std::pair{"Prescott", Sse3()}, std::pair{"Sandybridge", Avx()}}) {
    auto choice = ChooseBlasKernels(library, features, std::nullopt, std::nullopt);
    ASSERT_TRUE(choice.ok()) << library;
    EXPECT_FALSE(choice->reexec_with.has_value()) << library;
    EXPECT_NE(choice->reason.find("own detection"), std::string::npos) << choice->reason;
  }
}

TEST(BlasKernelChoice, AUsersRunnableCoretypeWins) {
  // Older than the best (the CI's second run of the learning tests) and still kept.
  auto choice = ChooseBlasKernels("Prescott", Avx512(), "Prescott", std::nullopt);
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_FALSE(choice->reexec_with.has_value());
  EXPECT_EQ(choice->reason, "OPENBLAS_CORETYPE=Prescott");
  choice = ChooseBlasKernels("Haswell", Avx2Fma(), "haswell", std::nullopt);
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_FALSE(choice->reexec_with.has_value());
  // A name newer than this table that the library runs as named.
  choice = ChooseBlasKernels("Zen5", Avx512(), "Zen5", std::nullopt);
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_FALSE(choice->reexec_with.has_value());
}

TEST(BlasKernelChoice, ACoretypeThisCpuCannotRunIsAnError) {
  auto choice = ChooseBlasKernels("SkylakeX", Avx2Fma(), "SkylakeX", std::nullopt);
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), Status::Code::kInvalidArgument);
  for (const char* phrase : {"OPENBLAS_CORETYPE=SkylakeX", "AVX-512", "AVX2 + FMA", "Haswell"}) {
    EXPECT_NE(choice.status().message().find(phrase), std::string::npos) << phrase << ": " << choice.status().message();
  }
}

TEST(BlasKernelChoice, AnUnknownCoretypeIsAnError) {
  // OpenBLAS itself falls back silently to a set of its choosing.
  auto choice = ChooseBlasKernels("Haswell", Avx2Fma(), "Foo", std::nullopt);
  ASSERT_FALSE(choice.ok());
  EXPECT_NE(choice.status().message().find("OPENBLAS_CORETYPE=Foo is not a kernel set"), std::string::npos)
      << choice.status().message();
}

TEST(BlasKernelChoice, ANameThisBuildRunsOtherKernelsForIsKeptWithAWarning) {
  // 0.3.21 runs Prescott for Katmai, and has no Sapphirerapids kernels (it runs Haswell).
  auto choice = ChooseBlasKernels("Prescott", Avx2Fma(), "Katmai", std::nullopt);
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_FALSE(choice->reexec_with.has_value());
  EXPECT_NE(choice->warning.find("runs its Prescott kernels instead"), std::string::npos) << choice->warning;
  CpuFeatures amx = Avx512();
  amx.avx512_bf16 = amx.amx_bf16 = true;
  choice = ChooseBlasKernels("Haswell", amx, "Sapphirerapids", std::nullopt);
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_NE(choice->warning.find("runs its Haswell kernels instead"), std::string::npos) << choice->warning;
  // A user's set the library runs as named: no warning.
  EXPECT_TRUE(ChooseBlasKernels("Core2", Avx2Fma(), "Core2", std::nullopt)->warning.empty());
}

TEST(BlasKernelChoice, PsformersOwnChoiceIsKeptOrMadeAgainForAnotherCpu) {
  auto choice = ChooseBlasKernels("SkylakeX", Avx512(), "SkylakeX", "SkylakeX");
  ASSERT_TRUE(choice.ok());
  EXPECT_FALSE(choice->reexec_with.has_value());
  EXPECT_NE(choice->reason.find("chosen by psformer"), std::string::npos) << choice->reason;
  // Inherited by a role on a host without AVX-512: not an error, chosen again.
  choice = ChooseBlasKernels("SkylakeX", Avx2Fma(), "SkylakeX", "SkylakeX");
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->reexec_with, "Haswell");
  // The variables differ: the user changed OPENBLAS_CORETYPE, which wins.
  choice = ChooseBlasKernels("Prescott", Avx512(), "Prescott", "SkylakeX");
  ASSERT_TRUE(choice.ok());
  EXPECT_FALSE(choice->reexec_with.has_value());
  EXPECT_EQ(choice->reason, "OPENBLAS_CORETYPE=Prescott");
}

// A kernel set OpenBLAS 0.3.21 has that this CPU cannot run, or "" if it runs them all.
std::string AKernelSetThisCpuCannotRun() {
  for (const char* name : {"SkylakeX", "Bulldozer", "Haswell", "Sandybridge"}) {
    if (!FindKernelSet(name, DetectCpuFeatures())->runnable) return name;
  }
  return "";
}

class BlasKernelProcessTest : public testing::SmallModelFilesTest {
 protected:
  // psformer translate (a matrix product per token) on a random model, under `variables`.
  testing::CommandResult Translate(const std::string& variables) {
    const std::string model = WriteRandomModel("model.bin", 40);
    return testing::RunShell("echo 'a b c' | " + variables + " timeout 60 " + testing::PsformerBinary() +
                             " translate --threads 1 --beam 1 --model " + model + " --spm " + spm_);
  }
};

TEST_F(BlasKernelProcessTest, AnUnknownCoretypeStopsPsformerWithAMessage) {
  const auto r = Translate("OPENBLAS_CORETYPE=Foo");
  EXPECT_EQ(r.exit_status, 2) << r.output;
  EXPECT_NE(r.output.find("psformer: error: OPENBLAS_CORETYPE=Foo is not a kernel set"), std::string::npos) << r.output;
}

TEST_F(BlasKernelProcessTest, ACoretypeThisCpuCannotRunStopsPsformerWithAMessage) {
  const std::string name = AKernelSetThisCpuCannotRun();
  if (name.empty()) GTEST_SKIP() << "this CPU runs every kernel set tried";
  const auto r = Translate("OPENBLAS_CORETYPE=" + name);
  EXPECT_EQ(r.exit_status, 2) << r.output;  // not 132, SIGILL
  EXPECT_NE(r.output.find("OPENBLAS_CORETYPE=" + name + " needs"), std::string::npos) << r.output;
}

TEST_F(BlasKernelProcessTest, AnInheritedChoiceThisCpuCannotRunIsMadeAgainByReexec) {
  // As a role started on another host inherits it: without the exec, the library would run
  // these kernels and the first matrix product would die of SIGILL.
  const std::string name = AKernelSetThisCpuCannotRun();
  if (name.empty()) GTEST_SKIP() << "this CPU runs every kernel set tried";
  const auto r = Translate("OPENBLAS_CORETYPE=" + name + " " + kChosenByPsformerVariable + "=" + name);
  EXPECT_EQ(r.exit_status, 0) << r.output;
}

}  // namespace
}  // namespace psformer
