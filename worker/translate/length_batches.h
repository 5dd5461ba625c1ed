// Groups sentences of similar length into translation batches, so that padding wastes little
// work, without changing what each sentence translates to (the callers put results back in input
// order by index).
#ifndef PSFORMER_WORKER_TRANSLATE_LENGTH_BATCHES_H_
#define PSFORMER_WORKER_TRANSLATE_LENGTH_BATCHES_H_

#include <vector>

namespace psformer {

// lengths[i]: source tokens of sentence i (without eos). Returns batches of sentence indices:
// every index exactly once; sentences sorted by length (ties in input order) and cut so that a
// batch's padded source size, sentences * (longest + 1), stays <= batch_tokens. A sentence too
// long for that goes alone. REQUIRES: batch_tokens > 0.
std::vector<std::vector<int>> LengthBatches(const std::vector<int>& lengths, int batch_tokens);

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_LENGTH_BATCHES_H_
