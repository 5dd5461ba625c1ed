// ParallelFor: one loop over [0, n) split into contiguous pieces, one thread each, for the
// servers' passes over a shard (sum, Adam, rounding, CRC). Each piece is a whole number of
// `grain` elements (the last takes the rest), so pieces can be aligned to blocks or elements.
// Elementwise work gives the same result however it is split; a caller that reduces (a CRC)
// keeps one result per piece and combines them in piece order.
#ifndef PSFORMER_COMMON_PARALLEL_FOR_H_
#define PSFORMER_COMMON_PARALLEL_FOR_H_

#include <cstddef>
#include <functional>

namespace psformer {

// The number of pieces ParallelFor(threads, n, grain, ...) makes: at most `threads`, at least 1,
// none empty (0 when n == 0).
int ParallelPieces(int threads, size_t n, size_t grain);

// Calls body(piece, begin, end) for each piece, on the calling thread and on the process's helper
// threads (made on first use and kept, asleep when idle), and returns when all are done. Which
// thread runs which piece is not fixed: bodies that reduce keep one result per piece.
// Thread-safe: calls from several threads at once share the helpers. REQUIRES: grain >= 1.
void ParallelFor(int threads, size_t n, size_t grain, const std::function<void(int, size_t, size_t)>& body);

}  // namespace psformer

#endif  // PSFORMER_COMMON_PARALLEL_FOR_H_
