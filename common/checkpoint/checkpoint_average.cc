#include "common/checkpoint/checkpoint_average.h"

#include <algorithm>
#include <filesystem>

#include "common/logging.h"

namespace psformer {
namespace fs = std::filesystem;
namespace {

// Adds every shard of checkpoint `step` to `sum`, checking that the shards tile the vector.
Status AccumulateCheckpoint(const std::string& run_dir, int64_t step, const CheckpointIdentity& id,
                            std::vector<double>* sum) {
  uint64_t next = 0;
  for (int k = 0; k < id.shards; ++k) {
    const std::string path = (fs::path(CheckpointDir(run_dir, step)) / ShardFileName(k, id.shards)).string();
    PSF_ASSIGN_OR_RETURN(ShardCheckpoint shard, ReadShardFile(path));
    if (shard.shard != k || shard.shards != id.shards || shard.step != step || shard.begin != next ||
        shard.end < shard.begin || shard.end > id.parameter_count) {
      return Status::Corruption(path + " holds another shard, step or element range than its name says");
    }
    for (uint64_t i = shard.begin; i < shard.end; ++i) (*sum)[i] += shard.params[i - shard.begin];
    next = shard.end;
  }
  if (next != id.parameter_count) {
    return Status::Corruption("the shards of " + CheckpointDir(run_dir, step) + " cover " + std::to_string(next) +
                              " of " + std::to_string(id.parameter_count) + " parameters");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<int64_t>> NewestCompleteCheckpoints(const std::string& run_dir, const CheckpointIdentity& id,
                                                         int last) {
  PSF_CHECK(last >= 1);
  std::vector<int64_t> steps;
  for (int64_t step : ListCheckpointSteps(run_dir)) {
    if (static_cast<int>(steps.size()) == last) break;
    const Status verified = VerifyCheckpoint(run_dir, step, id);
    if (verified.IsInvalidArgument()) return verified;
    if (!verified.ok()) {
      PSF_LOG(Warning) << "skipping checkpoint at step " << step << ": " << verified.message();
      continue;
    }
    steps.push_back(step);
  }
  std::reverse(steps.begin(), steps.end());
  return steps;
}

StatusOr<std::vector<float>> AverageCheckpoints(const std::string& run_dir, const CheckpointIdentity& id,
                                                const std::vector<int64_t>& steps,
                                                const std::function<void(size_t done)>& read) {
  PSF_CHECK(!steps.empty());
  std::vector<double> sum(id.parameter_count, 0.0);
  for (size_t i = 0; i < steps.size(); ++i) {
    PSF_RETURN_IF_ERROR(AccumulateCheckpoint(run_dir, steps[i], id, &sum));
    if (read) read(i + 1);
  }
  const double count = static_cast<double>(steps.size());
  std::vector<float> mean(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) mean[i] = static_cast<float>(sum[i] / count);
  return mean;
}

StatusOr<CheckpointAverage> AverageNewestCheckpoints(
    const std::string& run_dir, const CheckpointIdentity& id, int last,
    const std::function<Status(const std::vector<int64_t>& steps)>& chosen,
    const std::function<void(size_t done)>& read, const std::function<void(const std::string& reason)>& again) {
  for (int attempt = 1;; ++attempt) {
    const std::vector<int64_t> listed = ListCheckpointSteps(run_dir);
    // An error of NewestCompleteCheckpoints says the run's config does not describe them: final.
    PSF_ASSIGN_OR_RETURN(std::vector<int64_t> steps, NewestCompleteCheckpoints(run_dir, id, last));
    Status failed = chosen ? chosen(steps) : Status::Ok();
    if (failed.ok()) {
      StatusOr<std::vector<float>> params = AverageCheckpoints(run_dir, id, steps, read);
      if (params.ok()) return CheckpointAverage{std::move(steps), std::move(params).value()};
      failed = params.status();
    }
    // A checkpoint chosen is gone, or one it skipped was cut short under it: a live job's.
    if (attempt == kAverageAttempts || ListCheckpointSteps(run_dir) == listed) return failed;
    if (again) {
      again("the checkpoints of " + run_dir + " changed while they were read (" + failed.message() +
            "): its job is still writing them and removing the oldest (checkpoint.keep_last); choosing the newest "
            "again");
    }
  }
}

}  // namespace psformer
