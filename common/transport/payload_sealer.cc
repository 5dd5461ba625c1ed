#include "common/transport/payload_sealer.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "common/logging.h"
#include "common/parallel_for.h"

namespace psformer {
namespace {

constexpr size_t kCounterBytes = 8;
constexpr size_t kTagBytes = 16;
constexpr size_t kIvBytes = 12;  // 4 zero bytes, then the counter

struct CipherContext {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~CipherContext() { EVP_CIPHER_CTX_free(ctx); }
};

// An uninitialised buffer of n bytes as the owner of a Frame.
std::shared_ptr<uint8_t[]> Buffer(size_t n) { return std::shared_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(n, 1)]); }

}  // namespace

StatusOr<std::string> NewPayloadKey() {
  std::string key(PayloadSealer::kKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    return Status::Internal("cannot draw a random payload key (OpenSSL RAND_bytes failed)");
  }
  return key;
}

StatusOr<std::shared_ptr<PayloadSealer>> PayloadSealer::Create(const std::string& key) {
  if (key.size() != kKeyBytes) {
    return Status::InvalidArgument("the payload key has " + std::to_string(key.size()) + " bytes, not " +
                                   std::to_string(kKeyBytes));
  }
  return std::make_shared<PayloadSealer>(key);
}

PayloadSealer::PayloadSealer(const std::string& key) : job_key_(key) {
  PSF_CHECK(RAND_bytes(salt_.data(), static_cast<int>(salt_.size())) == 1);
  own_key_ = DeriveKey(salt_.data());
}

PayloadSealer::Key PayloadSealer::DeriveKey(const uint8_t* salt) const {
  Key key{};
  unsigned int length = 0;
  PSF_CHECK(HMAC(EVP_sha256(), job_key_.data(), static_cast<int>(job_key_.size()), salt, kSaltBytes, key.data(),
                 &length) != nullptr &&
            length == kKeyBytes);
  return key;
}

PayloadSealer::Key PayloadSealer::SenderKey(const uint8_t* salt) {
  const std::string id(reinterpret_cast<const char*>(salt), kSaltBytes);
  MutexLock lock(&mutex_);
  auto it = senders_.find(id);
  if (it == senders_.end()) {
    if (senders_.size() > 4096) senders_.clear();  // restarted peers leave salts behind
    it = senders_.emplace(id, DeriveKey(salt)).first;
  }
  return it->second;
}

Frame PayloadSealer::Seal(const Frame& frame) {
  const uint64_t counter = counter_.fetch_add(1);
  const size_t n = frame.size();
  auto out = Buffer(n + kOverhead);
  uint8_t* p = out.get();
  std::memcpy(p, salt_.data(), kSaltBytes);
  std::memcpy(p + kSaltBytes, &counter, kCounterBytes);
  uint8_t iv[kIvBytes] = {};
  std::memcpy(iv + 4, &counter, kCounterBytes);
  CipherContext c;
  int written = 0, final_written = 0;
  uint8_t* body = p + kSaltBytes + kCounterBytes;
  PSF_CHECK(c.ctx != nullptr &&
            EVP_EncryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, own_key_.data(), iv) == 1 &&
            (n == 0 || EVP_EncryptUpdate(c.ctx, body, &written, frame.data(), static_cast<int>(n)) == 1) &&
            EVP_EncryptFinal_ex(c.ctx, body + written, &final_written) == 1 &&
            EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, body + n) == 1);
  const uint8_t* data = p;
  return Frame::View(data, n + kOverhead, std::shared_ptr<const void>(std::move(out), data));
}

StatusOr<Frame> PayloadSealer::Open(const Frame& sealed) {
  if (sealed.size() < kOverhead) {
    return Status::InvalidArgument("a frame of " + std::to_string(sealed.size()) +
                                   " bytes is too short to be sealed (AES-256-GCM, cluster.encryption)");
  }
  const uint8_t* p = sealed.data();
  const Key key = SenderKey(p);
  uint8_t iv[kIvBytes] = {};
  std::memcpy(iv + 4, p + kSaltBytes, kCounterBytes);
  const size_t n = sealed.size() - kOverhead;
  const uint8_t* body = p + kSaltBytes + kCounterBytes;
  auto out = Buffer(n);
  CipherContext c;
  int written = 0, final_written = 0;
  uint8_t tag[kTagBytes];
  std::memcpy(tag, body + n, kTagBytes);
  const bool opened = c.ctx != nullptr && EVP_DecryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, key.data(), iv) == 1 &&
                      (n == 0 || EVP_DecryptUpdate(c.ctx, out.get(), &written, body, static_cast<int>(n)) == 1) &&
                      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) == 1 &&
                      EVP_DecryptFinal_ex(c.ctx, out.get() + written, &final_written) == 1;
  if (!opened) {
    return Status::InvalidArgument("a frame does not open under the job's payload key (AES-256-GCM): "
                                   "not sealed by a process of this job, or damaged");
  }
  const uint8_t* data = out.get();
  return Frame::View(data, n, std::shared_ptr<const void>(std::move(out), data));
}

std::vector<Frame> PayloadSealer::SealAll(const std::vector<Frame>& frames, int threads) {
  std::vector<Frame> sealed(frames.size());
  ParallelFor(threads, frames.size(), 1, [&](int, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) sealed[i] = Seal(frames[i]);
  });
  return sealed;
}

StatusOr<std::vector<Frame>> PayloadSealer::OpenAll(const std::vector<Frame>& frames, int threads) {
  std::vector<Frame> opened(frames.size());
  std::vector<Status> errors(frames.size());
  ParallelFor(threads, frames.size(), 1, [&](int, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      auto frame = Open(frames[i]);
      if (frame.ok()) {
        opened[i] = std::move(*frame);
      } else {
        errors[i] = frame.status();
      }
    }
  });
  for (const Status& s : errors) {
    if (!s.ok()) return s;
  }
  return opened;
}

}  // namespace psformer
