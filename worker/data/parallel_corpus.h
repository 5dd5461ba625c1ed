// A parallel corpus as the batch sampler sees it: numbered sentence pairs, each a source and a
// target sequence of token ids (no bos/eos; the batch layout adds those). Implemented by the
// in-memory corpus (the copy task, tests) and by the memory-mapped file `psformer prepare`
// writes, so sampling and batching code is written once.
#ifndef PSFORMER_WORKER_DATA_PARALLEL_CORPUS_H_
#define PSFORMER_WORKER_DATA_PARALLEL_CORPUS_H_

#include <cstdint>

namespace psformer {

class ParallelCorpus {
 public:
  virtual ~ParallelCorpus() = default;
  // Number of sentence pairs; pairs are numbered 0 .. size()-1.
  virtual int64_t size() const = 0;
  // Token counts of pair `pair`'s sides. REQUIRES: 0 <= pair < size().
  virtual int32_t src_length(int64_t pair) const = 0;
  virtual int32_t tgt_length(int64_t pair) const = 0;
  // Writes the src_length(pair) (tgt_length(pair)) token ids of a side to `out`.
  // Token ids are stored narrower than int32 in files, hence a copy rather than a span.
  virtual void CopySrc(int64_t pair, int32_t* out) const = 0;
  virtual void CopyTgt(int64_t pair, int32_t* out) const = 0;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_PARALLEL_CORPUS_H_
