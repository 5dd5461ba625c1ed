#include "pserver/server/async_policy.h"

#include "common/adam.h"

namespace psformer {

std::optional<AppliedUpdate> AsyncPolicy::Accept(int, WireMessage push, ShardOptimizer* optimizer) {
  if (grad_.size() != range_.size()) grad_.resize(range_.size());
  CopyPayloadAsFloats(push, grad_.data());
  if (push.header.target_tokens() > 0) NormalizeGradient(grad_.size(), push.header.target_tokens(), grad_.data());
  optimizer->Apply(push.header.step(), grad_.data());
  return AppliedUpdate{push.header.step(), /*whole_step=*/false, 0, 0};
}

}  // namespace psformer
