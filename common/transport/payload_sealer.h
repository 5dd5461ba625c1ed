// PayloadSealer: every frame a Van sends sealed with AES-256-GCM under the job's payload key
// (cluster.encryption = AES_256_GCM; docs/security.md), the alternative to CURVE for links where
// CURVE's XSalsa20-Poly1305 on ZeroMQ's I/O threads costs more CPU than the link is worth. AES-GCM
// runs on AES-NI at several GB/s a core, and the frames of a message are sealed (and opened) on
// the role's threads in parallel, in the pass that copies them out of the caller's memory.
//
// The promise is CURVE's: only the job's processes, which hold the key, can read a frame or make
// one that opens. A sealed frame is
//   [16 bytes: the sender's salt][8 bytes: the sender's frame counter][ciphertext][16 bytes: tag]
// Each sending Van draws a random salt and seals under its own key HMAC-SHA256(job key, salt), with
// the counter as the nonce, so no two frames anywhere in the job share a (key, nonce) pair, however
// many processes and restarts there are. A frame that does not open (another key, a flipped bit, a
// truncation) is refused with the message it came in; reordered or repeated whole messages are
// the protocol's business (sequences, steps, epochs), as over CURVE.
//
// Thread safety: Seal and Open may be called from any number of threads at once.
#ifndef PSFORMER_COMMON_TRANSPORT_PAYLOAD_SEALER_H_
#define PSFORMER_COMMON_TRANSPORT_PAYLOAD_SEALER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/frame.h"

namespace psformer {

class PayloadSealer {
 public:
  static constexpr size_t kKeyBytes = 32;
  static constexpr size_t kSaltBytes = 16;
  static constexpr size_t kOverhead = kSaltBytes + 8 + 16;  // salt, counter, tag

  // `key`: the job's 32-byte payload key (raw bytes).
  static StatusOr<std::shared_ptr<PayloadSealer>> Create(const std::string& key);

  // The sealed form of `frame` (kOverhead bytes longer).
  Frame Seal(const Frame& frame);
  // The frame `sealed` holds, or why it does not open.
  StatusOr<Frame> Open(const Frame& sealed);
  // Every frame of a message at once, split over up to `threads` threads.
  std::vector<Frame> SealAll(const std::vector<Frame>& frames, int threads);
  // The same for receiving: the opened frames, or why one of them did not open.
  StatusOr<std::vector<Frame>> OpenAll(const std::vector<Frame>& frames, int threads);

  explicit PayloadSealer(const std::string& key);

 private:
  using Key = std::array<uint8_t, kKeyBytes>;
  Key DeriveKey(const uint8_t* salt) const;
  // The key of the sender whose salt is `salt` (derived once, then cached).
  Key SenderKey(const uint8_t* salt);

  std::string job_key_;
  std::array<uint8_t, kSaltBytes> salt_{};
  Key own_key_{};
  std::atomic<uint64_t> counter_{0};
  Mutex mutex_;
  std::map<std::string, Key> senders_ PSF_GUARDED_BY(mutex_);  // by salt
};

// A fresh random payload key (32 bytes), for a job.
StatusOr<std::string> NewPayloadKey();

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_PAYLOAD_SEALER_H_
