// HostGroups: which workers' gradients are summed together on their host before they cross the
// network (cluster.host_summing, cluster.host_groups; docs/architecture.md, "Across hosts").
// Group g holds the workers [first(g), first(g) + size(g)), consecutive in worker order; a job
// without groups (flat path) has none. Under BSP the servers add the groups' sums in group
// order, each sum being its workers' gradients added in worker order, so the grouping decides
// the bits of every update: it is part of the job, written into config.pbtxt and checkpoints.
#ifndef PSFORMER_COMMON_HOST_GROUPS_H_
#define PSFORMER_COMMON_HOST_GROUPS_H_

#include <string>
#include <vector>

#include "common/proto/config.pb.h"

namespace psformer {

class HostGroups {
 public:
  HostGroups() = default;
  // Groups of the given worker counts. REQUIRES: each > 0.
  explicit HostGroups(std::vector<int> sizes);
  // The job's groups: cluster.host_groups when host summing is in effect (BSP, host_summing, two
  // groups or more); none otherwise (the flat path).
  static HostGroups Of(const proto::JobConfig& config);

  bool summing() const { return sizes_.size() >= 2; }
  int count() const { return static_cast<int>(sizes_.size()); }
  int size(int group) const { return sizes_[group]; }
  int first(int group) const { return firsts_[group]; }
  int workers() const { return firsts_.empty() ? 0 : firsts_.back() + sizes_.back(); }
  // The group of `worker`. REQUIRES: 0 <= worker < workers().
  int GroupOf(int worker) const;
  const std::vector<int>& sizes() const { return sizes_; }
  std::string ToString() const;  // "[2, 2]"; "[]" without groups

 private:
  std::vector<int> sizes_;
  std::vector<int> firsts_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_HOST_GROUPS_H_
