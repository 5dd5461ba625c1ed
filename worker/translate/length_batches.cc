#include "worker/translate/length_batches.h"

#include <algorithm>
#include <numeric>

#include "common/logging.h"

namespace psformer {

std::vector<std::vector<int>> LengthBatches(const std::vector<int>& lengths, int batch_tokens) {
  PSF_CHECK(batch_tokens > 0);
  std::vector<int> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lengths[a] < lengths[b]; });
  std::vector<std::vector<int>> batches;
  for (int index : order) {
    // Sorted ascending, so the newcomer is the longest of its batch.
    const long long padded = static_cast<long long>(lengths[index]) + 1;
    if (batches.empty() || static_cast<long long>(batches.back().size() + 1) * padded > batch_tokens) {
      batches.emplace_back();
    }
    batches.back().push_back(index);
  }
  return batches;
}

}  // namespace psformer
