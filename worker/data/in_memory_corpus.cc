#include "worker/data/in_memory_corpus.h"

#include <algorithm>

#include "common/logging.h"

namespace psformer {

void InMemoryCorpus::Add(std::span<const int32_t> src, std::span<const int32_t> tgt) {
  src_tokens_.insert(src_tokens_.end(), src.begin(), src.end());
  tgt_tokens_.insert(tgt_tokens_.end(), tgt.begin(), tgt.end());
  src_offsets_.push_back(static_cast<int64_t>(src_tokens_.size()));
  tgt_offsets_.push_back(static_cast<int64_t>(tgt_tokens_.size()));
}

int32_t InMemoryCorpus::src_length(int64_t pair) const {
  PSF_CHECK(pair >= 0 && pair < size());
  return static_cast<int32_t>(src_offsets_[pair + 1] - src_offsets_[pair]);
}

int32_t InMemoryCorpus::tgt_length(int64_t pair) const {
  PSF_CHECK(pair >= 0 && pair < size());
  return static_cast<int32_t>(tgt_offsets_[pair + 1] - tgt_offsets_[pair]);
}

void InMemoryCorpus::CopySrc(int64_t pair, int32_t* out) const {
  PSF_CHECK(pair >= 0 && pair < size());
  std::copy(src_tokens_.begin() + src_offsets_[pair], src_tokens_.begin() + src_offsets_[pair + 1], out);
}

void InMemoryCorpus::CopyTgt(int64_t pair, int32_t* out) const {
  PSF_CHECK(pair >= 0 && pair < size());
  std::copy(tgt_tokens_.begin() + tgt_offsets_[pair], tgt_tokens_.begin() + tgt_offsets_[pair + 1], out);
}

}  // namespace psformer
