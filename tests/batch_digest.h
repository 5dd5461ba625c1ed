// A printable digest of batches, shared by the data tests and the data_batch_dump helper so
// that a batch sequence computed in another process can be compared line by line.
#ifndef PSFORMER_TESTS_BATCH_DIGEST_H_
#define PSFORMER_TESTS_BATCH_DIGEST_H_

#include <cstdint>
#include <string>

#include "common/crc32c.h"
#include "worker/data/batch_source.h"

namespace psformer::testing {

// "step worker sentences S T crc", the CRC over every matrix and the pair ids.
inline std::string BatchDigestLine(int64_t step, int worker, const Batch& b) {
  uint32_t crc = 0;
  crc = Crc32c(crc, b.src.data(), b.src.size() * sizeof(int32_t));
  crc = Crc32c(crc, b.tgt_in.data(), b.tgt_in.size() * sizeof(int32_t));
  crc = Crc32c(crc, b.tgt_out.data(), b.tgt_out.size() * sizeof(int32_t));
  crc = Crc32c(crc, b.pair_ids.data(), b.pair_ids.size() * sizeof(int64_t));
  return std::to_string(step) + " " + std::to_string(worker) + " " + std::to_string(b.sentences) + " " +
         std::to_string(b.src_len) + " " + std::to_string(b.tgt_len) + " " + std::to_string(crc) + "\n";
}

// Digest lines of steps [first, last] for every worker of `workers`.
inline std::string DigestSteps(BatchSource& source, int64_t first, int64_t last, int workers) {
  std::string out;
  for (int64_t step = first; step <= last; ++step) {
    for (int w = 0; w < workers; ++w) out += BatchDigestLine(step, w, source.TrainBatch(step, w, workers));
  }
  return out;
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_BATCH_DIGEST_H_
