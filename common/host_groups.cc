#include "common/host_groups.h"

#include <algorithm>

namespace psformer {

HostGroups::HostGroups(std::vector<int> sizes) : sizes_(std::move(sizes)) {
  int first = 0;
  for (int size : sizes_) {
    firsts_.push_back(first);
    first += size;
  }
}

HostGroups HostGroups::Of(const proto::JobConfig& config) {
  const proto::ClusterConfig& cluster = config.cluster();
  if (!cluster.host_summing() || cluster.consistency() != proto::ClusterConfig::BSP || cluster.host_groups_size() < 2) {
    return HostGroups();
  }
  return HostGroups(std::vector<int>(cluster.host_groups().begin(), cluster.host_groups().end()));
}

int HostGroups::GroupOf(int worker) const {
  return static_cast<int>(std::upper_bound(firsts_.begin(), firsts_.end(), worker) - firsts_.begin()) - 1;
}

std::string HostGroups::ToString() const {
  std::string text = "[";
  for (size_t g = 0; g < sizes_.size(); ++g) text += (g ? ", " : "") + std::to_string(sizes_[g]);
  return text + "]";
}

}  // namespace psformer
