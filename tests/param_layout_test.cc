#include "common/param_layout.h"

#include <gtest/gtest.h>

namespace psformer {
namespace {

proto::ModelConfig BaseModel() {
  proto::ModelConfig m;
  m.set_layers(6);
  m.set_d_model(512);
  m.set_d_ff(2048);
  m.set_heads(8);
  return m;
}

TEST(ParamLayout, BaseModelHasAbout63MParametersWith37kVocab) {
  ParamLayout layout(BaseModel(), 37000);
  // Hand count: embedding V*d; encoder layer 4d^2+4d (attn) + 2d (ln) + 2df+f+d (ffn) + 2d (ln);
  // decoder layer adds a second attention and layer norm.
  const uint64_t d = 512, f = 2048, V = 37000;
  const uint64_t attn = 4 * d * d + 4 * d, ffn = 2 * d * f + f + d, ln = 2 * d;
  const uint64_t expected = V * d + 6 * (attn + ffn + 2 * ln) + 6 * (2 * attn + ffn + 3 * ln);
  EXPECT_EQ(layout.total_size(), expected);
  EXPECT_GT(layout.total_size(), 60'000'000u);
  EXPECT_LT(layout.total_size(), 66'000'000u);
}

TEST(ParamLayout, TensorsTileTheVectorInOrder) {
  proto::ModelConfig m = BaseModel();
  m.set_norm_position(proto::ModelConfig::PRE_LN);
  ParamLayout layout(m, 100);
  uint64_t next = 0;
  for (const ParamTensor& t : layout.tensors()) {
    EXPECT_EQ(t.offset, next) << t.name;
    next += t.size();
  }
  EXPECT_EQ(next, layout.total_size());
  EXPECT_EQ(layout.tensors().front().name, "embedding");
  EXPECT_EQ(layout.tensors().back().name, "decoder.final_ln.beta");
  EXPECT_EQ(layout.Get("decoder.0.cross_attn.w_kv").cols, 1024);
}

TEST(ShardOf, CoversEverythingContiguouslyAndBalanced) {
  for (uint64_t total : {1ull, 7ull, 100ull, 63'000'001ull}) {
    for (int shards = 1; shards <= 5 && static_cast<uint64_t>(shards) <= total; ++shards) {
      uint64_t next = 0, smallest = total, largest = 0;
      for (int i = 0; i < shards; ++i) {
        ShardRange r = ShardOf(total, shards, i);
        EXPECT_EQ(r.begin, next);
        next = r.end;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
      }
      EXPECT_EQ(next, total);
      EXPECT_LE(largest - smallest, 1u);
    }
  }
}

}  // namespace
}  // namespace psformer
