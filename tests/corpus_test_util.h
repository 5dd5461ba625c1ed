// Corpus files of the format before the SentencePiece digest, for the tests that check that
// they still load (worker/data/corpus_file.h, version 1).
#ifndef PSFORMER_TESTS_CORPUS_TEST_UTIL_H_
#define PSFORMER_TESTS_CORPUS_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "common/crc32c.h"

namespace psformer::testing {

// A version 2 corpus file's bytes in the version 1 layout psformer wrote before the digest: the
// same header less the digest (bytes 64..127), version 1, its checksum over bytes 0..47 alone.
// The data after the header is the same, and so is its checksum.
inline std::string AsVersion1CorpusFile(std::string bytes) {
  bytes.erase(64, 64);
  const uint32_t version = 1;
  std::memcpy(bytes.data() + 8, &version, 4);
  const uint32_t header = Crc32c(0, bytes.data(), 48);
  std::memcpy(bytes.data() + 48, &header, 4);
  return bytes;
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_CORPUS_TEST_UTIL_H_
