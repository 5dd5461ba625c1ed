// ParallelFor on its kept helper threads: every element once, in the pieces ParallelPieces says,
// from several calling threads at once and from inside a body.
#include "common/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace psformer {
namespace {

// Runs ParallelFor over n elements and checks each was visited once, by a piece of the right size.
void CheckCoversOnce(int threads, size_t n, size_t grain) {
  std::vector<std::atomic<int>> visits(n);
  std::vector<std::atomic<int>> pieces_seen(threads + 1);
  ParallelFor(threads, n, grain, [&](int piece, size_t begin, size_t end) {
    ASSERT_LT(begin, end);
    ASSERT_LE(end, n);
    EXPECT_TRUE(begin % grain == 0) << begin;
    ++pieces_seen[piece];
    for (size_t i = begin; i < end; ++i) ++visits[i];
  });
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(visits[i].load(), 1) << "element " << i << " of " << n;
  const int pieces = ParallelPieces(threads, n, grain);
  for (int p = 0; p <= threads; ++p) EXPECT_EQ(pieces_seen[p].load(), p < pieces ? 1 : 0) << p;
}

TEST(ParallelFor, VisitsEveryElementOnceInThePiecesItSays) {
  for (int threads : {1, 2, 3, 8, 16}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{65537}}) {
      for (size_t grain : {size_t{1}, size_t{64}}) CheckCoversOnce(threads, n, grain);
    }
  }
}

TEST(ParallelFor, CallsFromSeveralThreadsAndFromInsideABodyComplete) {
  std::vector<std::thread> callers;
  std::atomic<long> total{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        ParallelFor(6, 6000, 1, [&](int, size_t begin, size_t end) {
          // A nested call: its pieces are claimed by whoever is free, the caller included.
          ParallelFor(3, end - begin, 1, [&](int, size_t b, size_t e) { total += static_cast<long>(e - b); });
        });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4L * 50 * 6000);
}

}  // namespace
}  // namespace psformer
