// The parameter server's concerns one at a time, without sockets: the consistency policies
// (pserver/server/consistency_policy.h), the shutdown tracker and the recovery epochs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "common/config_loader.h"
#include "pserver/recovery/recovery_epoch.h"
#include "pserver/server/consistency_policy.h"
#include "pserver/server/gradient_aggregator.h"
#include "pserver/server/shutdown_tracker.h"
#include "pserver/timing.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<ConsistencyPolicy> Policy(proto::ClusterConfig::Consistency mode, int workers, int staleness = 2) {
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_cluster()->set_consistency(mode);
  config.mutable_cluster()->set_workers(workers);
  config.mutable_cluster()->set_staleness(staleness);
  return MakeConsistencyPolicy(config, ShardRange{0, 8});
}

proto::Header Pull(proto::Role role, int64_t step) {
  proto::Header h;
  h.set_type(proto::PULL);
  h.set_sender_role(role);
  h.set_step(step);
  return h;
}

// A push of n elements from worker `w`: value w + 1 + i / 8 at element i, with its own tokens and
// loss; `alive` watches its frames (released when the aggregator lets go of them).
WireMessage AggregatorPush(int w, size_t n, std::weak_ptr<void>* alive) {
  auto values = std::make_shared<std::vector<float>>(n);
  for (size_t i = 0; i < n; ++i) (*values)[i] = static_cast<float>(w + 1) + static_cast<float>(i) / 8;
  *alive = values;
  WireMessage m;
  m.header.set_dtype(proto::FLOAT32);
  m.header.set_begin(0);
  m.header.set_end(n);
  m.header.set_target_tokens(10 + w);
  m.header.set_loss_sum(0.5 * (w + 1));
  m.payload.push_back(Frame::View(values->data(), n * sizeof(float), values));
  return m;
}

// Whatever the arrival order, every push is held in its frames until all are in, then handed to
// the update in worker order, with tokens and loss summed in worker order; Consumed releases
// the frames.
TEST(GradientAggregator, HoldsEveryPushUntilAllAreInAndHandsThemOverInWorkerOrder) {
  const size_t n = 5;
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}}) {
    SCOPED_TRACE(::testing::Message() << order[0] << order[1] << order[2]);
    GradientAggregator agg(3, n);
    agg.Begin(7);
    std::vector<std::weak_ptr<void>> alive(3);
    for (size_t k = 0; k < order.size(); ++k) {
      EXPECT_FALSE(agg.Complete());
      EXPECT_FALSE(agg.Has(order[k]));
      agg.Add(order[k], AggregatorPush(order[k], n, &alive[order[k]]));
      EXPECT_TRUE(agg.Has(order[k]));
    }
    ASSERT_TRUE(agg.Complete());
    EXPECT_EQ(agg.total_tokens(), 10u + 11u + 12u);
    EXPECT_EQ(agg.loss_sum(), (0.5 + 1.0) + 1.5);
    const PieceGradient g = agg.gradient();
    EXPECT_EQ(g.sum, nullptr);
    ASSERT_EQ(g.parts.size(), 3u);
    for (int w = 0; w < 3; ++w) {
      EXPECT_EQ(g.parts[w]->header.target_tokens(), 10u + w);
      EXPECT_FALSE(alive[w].expired());
    }
    agg.Consumed();
    EXPECT_TRUE(agg.Complete());
    for (int w = 0; w < 3; ++w) EXPECT_TRUE(alive[w].expired());
    agg.Begin(8);
    EXPECT_FALSE(agg.Complete());
    EXPECT_FALSE(agg.Has(0));
  }
}

TEST(ConsistencyPolicy, BspTakesOnlyTheStepItCollectsAndAnswersOnlyAppliedSteps) {
  auto bsp = Policy(proto::ClusterConfig::BSP, 2);
  bsp->Restart(4);  // the shard stands after step 4: step 5 is being collected.
  const ShardProgress progress{4, {4, 5}};
  EXPECT_FALSE(bsp->PushTooEarly(5, progress));
  EXPECT_TRUE(bsp->PushTooEarly(6, progress));
  EXPECT_TRUE(bsp->PullReady(Pull(proto::WORKER, 4), progress));
  EXPECT_FALSE(bsp->PullReady(Pull(proto::WORKER, 5), progress));
  EXPECT_TRUE(bsp->Overtaken(2, progress));
  EXPECT_FALSE(bsp->Overtaken(3, progress));  // kept for a restarted worker, while the server still has it
  EXPECT_FALSE(bsp->Overtaken(4, progress));
  EXPECT_FALSE(bsp->CheckpointReady(5, progress));
  EXPECT_EQ(bsp->CheckpointWorkerSteps(4, progress), (std::vector<int64_t>{4, 4}));  // the cut is "after 4".
  EXPECT_TRUE(bsp->AppliesWholeSteps());
}

TEST(ConsistencyPolicy, SspHoldsWorkersWithinTheStalenessBound) {
  auto ssp = Policy(proto::ClusterConfig::SSP, 3, /*staleness=*/2);
  const ShardProgress progress{7, {7, 3, 5}};  // the slowest worker pushed step 3.
  EXPECT_TRUE(ssp->PullReady(Pull(proto::WORKER, 5), progress));
  EXPECT_FALSE(ssp->PullReady(Pull(proto::WORKER, 6), progress));
  EXPECT_TRUE(ssp->PullReady(Pull(proto::COORDINATOR, 6), progress));
  EXPECT_FALSE(ssp->PushTooEarly(6, progress));
  EXPECT_TRUE(ssp->PushTooEarly(7, progress));
  EXPECT_FALSE(ssp->Overtaken(1, progress));
  EXPECT_EQ(ssp->CheckpointWorkerSteps(9, progress), progress.worker_steps);
  EXPECT_FALSE(ssp->AppliesWholeSteps());
}

TEST(ConsistencyPolicy, AsyncNeverWaits) {
  auto async = Policy(proto::ClusterConfig::ASYNC, 2);
  const ShardProgress progress{1, {1, 0}};
  EXPECT_FALSE(async->PushTooEarly(50, progress));
  EXPECT_TRUE(async->PullReady(Pull(proto::WORKER, 50), progress));
  EXPECT_TRUE(async->CheckpointReady(50, progress));
  EXPECT_FALSE(async->Overtaken(0, progress));
}

TEST(ShutdownTracker, StopsOnceEveryWorkerHeardFromIsDone) {
  ShutdownTracker tracker(3, /*retry_ms=*/100);
  const auto t0 = ShutdownTracker::Clock::now();
  tracker.Heard(0);
  tracker.Heard(1);  // worker 2 never spoke: it does not hold the server up.
  tracker.WorkerSaidGoodbye(0, t0);
  EXPECT_FALSE(tracker.ShouldStop(t0));  // the job has not ended.
  tracker.JobEnded(t0);
  EXPECT_FALSE(tracker.ShouldStop(t0));  // worker 1 is not done.
  tracker.WorkerSaidGoodbye(1, t0);
  EXPECT_TRUE(tracker.ShouldStop(t0));  // nobody was refused, so nobody can have missed it.
}

// The coordinator that names the job's last step has every worker hold the server up, also one
// not heard from yet (a resumed job with no step left ends before its other workers' HELLO).
TEST(ShutdownTracker, WaitsForEveryWorkerWhenTheCoordinatorSaysSo) {
  ShutdownTracker tracker(2, /*retry_ms=*/100);
  const auto t0 = ShutdownTracker::Clock::now();
  tracker.Heard(0);
  tracker.WorkerSaidGoodbye(0, t0);
  tracker.JobEnded(t0, /*every_worker=*/true);
  EXPECT_FALSE(tracker.ShouldStop(t0));  // worker 1 has not spoken yet
  tracker.Heard(1);
  tracker.WorkerSaidGoodbye(1, t0);
  EXPECT_TRUE(tracker.ShouldStop(t0));
  EXPECT_FALSE(tracker.Overdue(t0));
}

TEST(ShutdownTracker, LingersForAResendAfterTellingAWorkerTheJobFinished) {
  ShutdownTracker tracker(1, /*retry_ms=*/100);
  const auto t0 = ShutdownTracker::Clock::now();
  tracker.Heard(0);
  tracker.JobEnded(t0);
  tracker.WorkerToldJobFinished(0, t0);
  const auto linger = ServerLingerAfterJobEnd(100);
  EXPECT_GT(linger, LongestRetryInterval(100));
  EXPECT_FALSE(tracker.ShouldStop(t0 + linger - milliseconds(1)));
  EXPECT_TRUE(tracker.ShouldStop(t0 + linger));
}

TEST(ShutdownTracker, IsOverdueAfterTheFinishDeadline) {
  ShutdownTracker tracker(1, /*retry_ms=*/100);
  const auto t0 = ShutdownTracker::Clock::now();
  tracker.Heard(0);
  EXPECT_FALSE(tracker.Overdue(t0 + kServerFinishDeadline * 2));  // the job has not ended.
  tracker.JobEnded(t0);
  EXPECT_FALSE(tracker.Overdue(t0 + kServerFinishDeadline));
  EXPECT_TRUE(tracker.Overdue(t0 + kServerFinishDeadline + milliseconds(1)));
  EXPECT_FALSE(tracker.ShouldStop(t0 + kServerFinishDeadline * 2));  // worker 0 never said it was done.
}

TEST(Timing, ResendIntervalDoublesThenStaysAtEightTimes) {
  EXPECT_EQ(RetryInterval(100, 1), milliseconds(100));
  EXPECT_EQ(RetryInterval(100, 2), milliseconds(200));
  EXPECT_EQ(RetryInterval(100, 3), milliseconds(400));
  EXPECT_EQ(RetryInterval(100, 4), milliseconds(800));
  EXPECT_EQ(RetryInterval(100, 9), milliseconds(800));
  EXPECT_EQ(LongestRetryInterval(100), milliseconds(800));
}

TEST(RecoveryEpoch, RefusesRequestsOfAnotherEpochAndRollbacksIntoAnOlderOne) {
  RecoveryEpoch epoch;
  epoch.Enter(3, 40);
  proto::Header h;
  h.set_type(proto::PUSH);
  h.set_epoch(3);
  EXPECT_FALSE(epoch.Check(h).has_value());
  h.set_epoch(2);
  const Refusal old = epoch.Check(h);
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->reason, RejectReason::kOtherEpoch);
  EXPECT_NE(old->detail.find("began at step 40"), std::string::npos) << old->detail;
  h.set_type(proto::HELLO);  // answered in any epoch.
  EXPECT_FALSE(epoch.Check(h).has_value());
  h.set_type(proto::ROLLBACK);
  EXPECT_TRUE(epoch.Check(h).has_value());
  h.set_epoch(4);
  EXPECT_FALSE(epoch.Check(h).has_value());
}

TEST(RecoveryEpoch, EpochsTakenInARunDirectoryOnlyGrow) {
  TempDir dir;
  const std::string run = dir.path().string();
  EXPECT_EQ(TakeRecoveryEpoch(run, 0, 1), 1u);
  EXPECT_EQ(TakeRecoveryEpoch(run, 1, 1), 2u);
  EXPECT_EQ(TakeRecoveryEpoch(run, 0, 2), 3u);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "checkpoints" / "epochs" / "3"));
  EXPECT_NE(TakeRecoveryEpoch("", 0, 1), TakeRecoveryEpoch("", 1, 1));
}

}  // namespace
}  // namespace psformer::testing
