#include "pserver/server/async_policy.h"

namespace psformer {

std::optional<AppliedUpdate> AsyncPolicy::Accept(int, WireMessage push, ShardOptimizer* optimizer) {
  if (grad_.size() != range_.size()) grad_.resize(range_.size());
  CopyPayloadAsFloats(push, grad_.data(), threads_);
  optimizer->Apply(push.header.step(), grad_.data(), push.header.target_tokens());  // normalises on the way
  return AppliedUpdate{push.header.step(), /*whole_step=*/false, 0, 0};
}

}  // namespace psformer
