#include "common/parallel_for.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace psformer {
namespace {

// Grains per piece, so that `pieces` pieces cover n elements.
size_t GrainsPerPiece(size_t n, size_t grain, int pieces) {
  const size_t grains = (n + grain - 1) / grain;
  return (grains + pieces - 1) / pieces;
}

}  // namespace

int ParallelPieces(int threads, size_t n, size_t grain) {
  if (n == 0) return 0;
  const size_t grains = (n + grain - 1) / grain;
  const int wanted = static_cast<int>(std::min<size_t>(std::max(threads, 1), grains));
  // With rounding up, fewer pieces than wanted may already cover n.
  const size_t per = GrainsPerPiece(n, grain, wanted);
  return static_cast<int>((grains + per - 1) / per);
}

void ParallelFor(int threads, size_t n, size_t grain, const std::function<void(int, size_t, size_t)>& body) {
  const int pieces = ParallelPieces(threads, n, grain);
  if (pieces <= 1) {
    if (n > 0) body(0, 0, n);
    return;
  }
  const size_t per = GrainsPerPiece(n, grain, pieces) * grain;
  std::vector<std::thread> helpers;
  helpers.reserve(pieces - 1);
  for (int p = 1; p < pieces; ++p) {
    const size_t begin = p * per, end = std::min(n, begin + per);
    helpers.emplace_back([&body, p, begin, end] { body(p, begin, end); });
  }
  body(0, 0, std::min(n, per));
  for (auto& t : helpers) t.join();
}

}  // namespace psformer
