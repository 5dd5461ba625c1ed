#include "pserver/server/bsp_policy.h"

#include "common/logging.h"

namespace psformer {

BspPolicy::BspPolicy(int workers, ShardRange range, int threads) : aggregator_(workers, range.size(), threads) {}

std::optional<AppliedUpdate> BspPolicy::Accept(int worker, WireMessage push, ShardOptimizer* optimizer) {
  aggregator_.Add(worker, std::move(push));
  if (!aggregator_.Complete()) return std::nullopt;
  const int64_t step = aggregator_.step();
  if (aggregator_.total_tokens() == 0) {
    PSF_LOG(Warning) << "step " << step << " has no target tokens; its gradient is applied unnormalised";
  }
  optimizer->Apply(step, aggregator_.sum(), aggregator_.total_tokens());  // normalises on the way
  const AppliedUpdate update{step, /*whole_step=*/true, aggregator_.loss_sum(), aggregator_.total_tokens()};
  aggregator_.Begin(step + 1);
  return update;
}

}  // namespace psformer
