// Servers split their passes over a shard (sum, Adam, bf16 rounding, CRC) across
// threads_per_process threads: the parameters must be the same bytes with 1 and 4 threads, and
// equal to the whole-vector reference, for fp32 and bf16 gradients and for bf16 pulls.
#include <cstring>

#include "common/bfloat16.h"
#include "tests/pserver_test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kTotal = 200003;  // two shards of ~100k: 13 blocks each, so 4 threads share them

struct Pulled {
  std::vector<float> exact;    // FLOAT32 pull after the last step
  std::vector<float> rounded;  // BFLOAT16 pull of the same step
};

Pulled RunBsp(int threads, proto::DType gradients) {
  proto::JobConfig config = PsConfig(3, 2, proto::ClusterConfig::BSP);
  config.mutable_cluster()->set_param_dtype(proto::ClusterConfig::BF16);  // rounding in the update pass
  ServerGroup group(config, kTotal, "", false, threads);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < 3; ++w) clients.push_back(MakeClient(group, kTotal, w, gradients));
  Pulled out{std::vector<float>(kTotal), std::vector<float>(kTotal)};
  for (auto& c : clients) EXPECT_TRUE(c->Wait(*c->Pull(0, out.exact.data())).ok());
  constexpr int kSteps = 3;
  for (int64_t t = 1; t <= kSteps; ++t) {
    for (int w : {2, 0, 1}) {  // out of order: the servers must still sum in worker order
      const std::vector<float> grad = Gradient(w, t, kTotal);
      const Status s = clients[w]->Wait(*clients[w]->Push(t, grad.data(), Tokens(w, t), 1.0));
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (auto& c : clients) {
      const bool last = t == kSteps;
      const Status s = c->Wait(*c->Pull(t, out.rounded.data(), proto::BFLOAT16));
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (last) {
        EXPECT_TRUE(c->Wait(*c->Pull(t, out.exact.data(), proto::FLOAT32)).ok());
      }
    }
  }
  return out;
}

TEST(PserverThreads, OneAndFourThreadsGiveTheSameBytes) {
  for (proto::DType gradients : {proto::FLOAT32, proto::BFLOAT16}) {
    SCOPED_TRACE(proto::DType_Name(gradients));
    const Pulled one = RunBsp(1, gradients);
    const Pulled four = RunBsp(4, gradients);
    EXPECT_TRUE(BitwiseEqual(one.exact, four.exact));
    EXPECT_TRUE(BitwiseEqual(one.rounded, four.rounded));
    ReferenceTrainer ref(PsConfig(3, 1, proto::ClusterConfig::BSP), kTotal, gradients == proto::BFLOAT16);
    for (int64_t t = 1; t <= 3; ++t) ref.Step(t);
    EXPECT_TRUE(BitwiseEqual(four.exact, ref.params()));
    std::vector<float> ref_rounded(kTotal);
    for (uint64_t i = 0; i < kTotal; ++i) ref_rounded[i] = Bf16ToFloat(FloatToBf16(ref.params()[i]));
    EXPECT_TRUE(BitwiseEqual(four.rounded, ref_rounded));
  }
}

}  // namespace
}  // namespace psformer::testing
