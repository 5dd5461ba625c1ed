#include "common/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/config_loader.h"

namespace psformer {
namespace {

proto::JobConfig Config(int d_model, int warmup) {
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_model()->set_d_model(d_model);
  config.mutable_optimizer()->set_warmup_steps(warmup);
  return config;
}

TEST(LearningRate, FollowsThePapersFormula) {
  const auto config = Config(512, 4000);
  for (int64_t step : {1, 10, 1000, 3999, 4000, 4001, 10000, 100000}) {
    const double s = static_cast<double>(step);
    const double expected = std::pow(512.0, -0.5) * std::min(std::pow(s, -0.5), s * std::pow(4000.0, -1.5));
    EXPECT_DOUBLE_EQ(LearningRate(config, step), expected) << step;
  }
}

TEST(LearningRate, PeaksAtTheEndOfWarmup) {
  const auto config = Config(512, 4000);
  EXPECT_LT(LearningRate(config, 3999), LearningRate(config, 4000));
  EXPECT_LT(LearningRate(config, 4001), LearningRate(config, 4000));
  // Peak value for the base model: 512^-0.5 * 4000^-0.5 ~= 7.0e-4.
  EXPECT_NEAR(LearningRate(config, 4000), 6.9877e-4, 1e-7);
  // Linear during warm-up.
  EXPECT_NEAR(LearningRate(config, 2000) * 2, LearningRate(config, 4000), 1e-12);
}

TEST(LearningRate, ConstantAndScaled) {
  auto config = Config(512, 4000);
  config.mutable_schedule()->set_scale(2.0f);
  EXPECT_DOUBLE_EQ(LearningRate(config, 4000), 2.0 * LearningRate(Config(512, 4000), 4000));
  config.mutable_schedule()->set_kind(proto::ScheduleConfig::CONSTANT);
  config.mutable_schedule()->set_constant_lr(0.5f);
  EXPECT_DOUBLE_EQ(LearningRate(config, 7), 0.5);
}

}  // namespace
}  // namespace psformer
