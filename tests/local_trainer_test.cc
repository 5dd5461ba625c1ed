// The local trainer: save then resume continues with bit-identical losses and weights, and a
// short run of the copy task lowers the loss.
#include "worker/train/local_trainer.h"

#include <gtest/gtest.h>

#include "common/config_loader.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

proto::JobConfig TinyCopyConfig() {
  auto config = ParseConfigText(R"(
    name: "tiny-copy"
    model { layers: 1 d_model: 16 d_ff: 32 heads: 2 dropout: 0.1 attention_dropout: 0.1 max_positions: 32 }
    optimizer { warmup_steps: 20 }
    data { task: COPY copy_vocab_size: 12 copy_min_length: 2 copy_max_length: 7 copy_train_size: 500
           copy_valid_size: 40 }
    batching { src_tokens_per_step: 160 tgt_tokens_per_step: 160 }
    cluster { threads_per_process: 2 }
    training { seed: 5 }
  )",
                                "tiny-copy");
  EXPECT_TRUE(config.ok()) << config.status().message();
  FillDefaults(&config.value());
  EXPECT_TRUE(ValidateConfig(*config).ok());
  return *config;
}

TEST(LocalTrainer, SaveThenResumeGivesBitIdenticalLosses) {
  const proto::JobConfig config = TinyCopyConfig();
  auto source = MakeBatchSource(config);
  ASSERT_TRUE(source.ok()) << source.status().message();
  constexpr int kSteps = 8, kSaveAt = 3;

  LocalTrainer straight(config, source->get());
  std::vector<double> straight_losses;
  for (int i = 0; i < kSteps; ++i) straight_losses.push_back(straight.Step()->stats.loss_sum);

  testing::TempDir dir;
  const std::string path = dir.File("trainer_state.bin");
  {
    LocalTrainer first(config, source->get());
    for (int i = 0; i < kSaveAt; ++i) EXPECT_EQ(first.Step()->stats.loss_sum, straight_losses[i]);
    ASSERT_TRUE(WriteTrainerState(path, first.State()).ok());
  }
  auto state = ReadTrainerState(path);
  ASSERT_TRUE(state.ok()) << state.status().message();
  LocalTrainer resumed(config, source->get());
  ASSERT_TRUE(resumed.Restore(*state).ok());
  EXPECT_EQ(resumed.step(), kSaveAt);
  for (int i = kSaveAt; i < kSteps; ++i) {
    const StepReport r = *resumed.Step();
    EXPECT_EQ(r.step, i + 1);
    // Bitwise: the same batch, dropout masks, arithmetic order and Adam state.
    EXPECT_EQ(r.stats.loss_sum, straight_losses[i]) << "step " << r.step;
  }
  EXPECT_EQ(resumed.params(), straight.params());
}

TEST(LocalTrainer, RefusesAStateOfAnotherModel) {
  const proto::JobConfig config = TinyCopyConfig();
  auto source = MakeBatchSource(config);
  ASSERT_TRUE(source.ok());
  LocalTrainer trainer(config, source->get());
  TrainerState state = trainer.State();
  state.model.set_d_ff(64);
  const Status s = trainer.Restore(state);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("another model"), std::string::npos) << s.message();
}

TEST(LocalTrainer, LearnsTheCopyTaskALittle) {
  proto::JobConfig config = TinyCopyConfig();
  config.mutable_schedule()->set_scale(2.0f);
  auto source = MakeBatchSource(config);
  ASSERT_TRUE(source.ok());
  LocalTrainer trainer(config, source->get());
  const ValidReport before = *trainer.Validate();
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(trainer.Step().ok());
  const ValidReport after = *trainer.Validate();
  EXPECT_GT(before.tokens, 0);
  EXPECT_LT(after.loss, before.loss - 0.3) << "before " << before.loss << " after " << after.loss;
  EXPECT_GT(after.accuracy, before.accuracy);
}

TEST(LocalTrainer, ABatchLongerThanMaxPositionsIsAnErrorNotACrash) {
  proto::JobConfig config = TinyCopyConfig();
  auto source = MakeBatchSource(config);  // sentences up to 7 tokens + eos
  ASSERT_TRUE(source.ok());
  config.mutable_model()->set_max_positions(4);  // as if the data had been prepared for a longer model
  LocalTrainer trainer(config, source->get());
  auto step = trainer.Step();
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.status().message().find("model.max_positions (4)"), std::string::npos) << step.status().message();
  EXPECT_EQ(trainer.step(), 0);
  EXPECT_FALSE(trainer.Validate().ok());
}

}  // namespace
}  // namespace psformer
