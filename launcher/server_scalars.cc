#include "launcher/server_scalars.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/logging.h"

namespace psformer {
namespace {

// "stale step" -> "stale_step": TensorBoard tags read better without spaces.
std::string TagWord(const std::string& name) {
  std::string word = name;
  std::replace(word.begin(), word.end(), ' ', '_');
  return word;
}

}  // namespace

StatusOr<std::unique_ptr<ServerScalars>> ServerScalars::Open(ServerScalarsOptions options,
                                                             const ParameterServerStats* stats,
                                                             std::shared_ptr<const VanTraffic> traffic) {
  PSF_CHECK(options.every_steps >= 1);
  PSF_ASSIGN_OR_RETURN(std::unique_ptr<tensorboard::EventWriter> writer, tensorboard::EventWriter::Open(options.dir));
  return std::unique_ptr<ServerScalars>(
      new ServerScalars(std::move(options), stats, std::move(traffic), std::move(writer)));
}

ServerScalars::ServerScalars(ServerScalarsOptions options, const ParameterServerStats* stats,
                             std::shared_ptr<const VanTraffic> traffic,
                             std::unique_ptr<tensorboard::EventWriter> writer)
    : options_(std::move(options)), stats_(stats), traffic_(std::move(traffic)), writer_(std::move(writer)) {
  last_ = Now(Clock::now());
  // A restarted server continues after the points of its earlier incarnations.
  last_point_step_ = std::max<int64_t>(0, writer_->LastStep("server/pending_pulls"));
  rollbacks_seen_ = stats_->rollbacks.load();
}

ServerScalars::Baseline ServerScalars::Now(Clock::time_point now) const {
  Baseline b;
  b.time = now;
  b.step = stats_->applied_step.load();
  b.update_ns = stats_->update_ns.load();
  b.updates = stats_->updates.load();
  b.bytes_in = traffic_->bytes_in.load();
  b.bytes_out = traffic_->bytes_out.load();
  return b;
}

Status ServerScalars::Sample(Clock::time_point now) {
  const Baseline current = Now(now);
  most_pending_pulls_ = std::max(most_pending_pulls_, stats_->pending_pulls.load());
  most_pending_pushes_ = std::max(most_pending_pushes_, stats_->pending_pushes.load());
  const uint64_t rollbacks = stats_->rollbacks.load();
  if (rollbacks != rollbacks_seen_) {
    rollbacks_seen_ = rollbacks;
    const int64_t step = stats_->rollback_step.load();
    PSF_RETURN_IF_ERROR(writer_->AddText(
        "events", step, options_.name + " rolled back to the checkpoint of step " + std::to_string(step)));
    // The update count is the checkpoint's now: the mean update time starts over from here. The
    // next point is still after the last one (TensorBoard keeps the first value of a step).
    last_.updates = current.updates;
    last_.update_ns = current.update_ns;
  }
  const int64_t every = options_.every_steps;
  const int64_t multiple = current.step / every * every;
  if (multiple > last_point_step_) {
    // At the multiple passed, where the job's own scalars are, though the figures run up to now.
    Baseline at_multiple = current;
    at_multiple.step = multiple;
    return WritePoint(at_multiple);
  }
  return Status::Ok();
}

Status ServerScalars::Finish(Clock::time_point now) {
  PSF_RETURN_IF_ERROR(Sample(now));
  const Baseline current = Now(now);
  if (current.step > last_point_step_) return WritePoint(current);
  return Status::Ok();
}

Status ServerScalars::WritePoint(const Baseline& current) {
  std::vector<std::pair<std::string, double>> values;
  if (current.updates > last_.updates) {
    values.emplace_back("server/update_ms", 1e-6 * static_cast<double>(current.update_ns - last_.update_ns) /
                                                static_cast<double>(current.updates - last_.updates));
  }
  const double seconds = std::chrono::duration<double>(current.time - last_.time).count();
  if (seconds > 0) {
    values.emplace_back("server/bytes_in_per_s", static_cast<double>(current.bytes_in - last_.bytes_in) / seconds);
    values.emplace_back("server/bytes_out_per_s", static_cast<double>(current.bytes_out - last_.bytes_out) / seconds);
  }
  values.emplace_back("server/pending_pulls", static_cast<double>(most_pending_pulls_));
  values.emplace_back("server/pending_pushes", static_cast<double>(most_pending_pushes_));
  for (uint32_t r = 1; r < static_cast<uint32_t>(RejectReason::kCount); ++r) {
    const auto reason = static_cast<RejectReason>(r);
    const uint64_t refused = stats_->rejected.Get(reason);
    if (refused > 0) values.emplace_back("refused/" + TagWord(RejectReasonName(reason)), static_cast<double>(refused));
  }
  last_ = current;
  last_point_step_ = current.step;
  most_pending_pulls_ = most_pending_pushes_ = 0;
  return writer_->AddScalars(current.step, values);
}

}  // namespace psformer
