// A ParallelCorpus held in vectors: the copy task's generated data, and small corpora in tests.
#ifndef PSFORMER_WORKER_DATA_IN_MEMORY_CORPUS_H_
#define PSFORMER_WORKER_DATA_IN_MEMORY_CORPUS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "worker/data/parallel_corpus.h"

namespace psformer {

class InMemoryCorpus : public ParallelCorpus {
 public:
  InMemoryCorpus() = default;

  // Appends a pair (copied); its number is the previous size().
  void Add(std::span<const int32_t> src, std::span<const int32_t> tgt);

  int64_t size() const override { return static_cast<int64_t>(src_offsets_.size()) - 1; }
  int32_t src_length(int64_t pair) const override;
  int32_t tgt_length(int64_t pair) const override;
  void CopySrc(int64_t pair, int32_t* out) const override;
  void CopyTgt(int64_t pair, int32_t* out) const override;

 private:
  // Pair i's source is src_tokens_[src_offsets_[i] .. src_offsets_[i+1]); the same for targets.
  std::vector<int32_t> src_tokens_;      // (total source tokens)
  std::vector<int32_t> tgt_tokens_;      // (total target tokens)
  std::vector<int64_t> src_offsets_{0};  // (pairs + 1)
  std::vector<int64_t> tgt_offsets_{0};  // (pairs + 1)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_IN_MEMORY_CORPUS_H_
