#include "common/transport/curve_keys.h"

#include <zmq.h>

#include <cstdlib>
#include <vector>

#include "common/logging.h"
#include "common/transport/payload_sealer.h"

namespace psformer {
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr size_t kKeyBytes = 32;

bool IsZ85Key(const std::string& z85) {
  if (z85.size() != kZ85KeyChars) return false;
  uint8_t raw[kKeyBytes];
  return zmq_z85_decode(raw, z85.c_str()) != nullptr;
}

Status CheckKey(const std::string& field, const std::string& z85, bool required) {
  if (z85.empty()) {
    if (required) return Status::InvalidArgument(std::string(kCurveKeysVariable) + ": " + field + " is missing");
    return Status::Ok();
  }
  if (!IsZ85Key(z85)) {
    return Status::InvalidArgument(std::string(kCurveKeysVariable) + ": " + field + " is not a " +
                                   std::to_string(kZ85KeyChars) + "-character Z85 key (" + std::to_string(z85.size()) +
                                   " characters)");
  }
  return Status::Ok();
}

}  // namespace

bool CurveAvailable() { return zmq_has("curve") != 0; }

StatusOr<CurveKeys> GenerateCurveKeys() {
  if (!CurveAvailable()) {
    return Status::Unavailable(
        "this libzmq has no CURVE support; install a libzmq built with libsodium or set "
        "cluster.authenticate=false");
  }
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  CurveKeys keys;
  if (zmq_curve_keypair(pub, sec) != 0) return Status::Internal("zmq_curve_keypair failed for the server keypair");
  keys.server_public = pub;
  keys.server_secret = sec;
  if (zmq_curve_keypair(pub, sec) != 0) return Status::Internal("zmq_curve_keypair failed for the client keypair");
  keys.client_public = pub;
  keys.client_secret = sec;
  PSF_ASSIGN_OR_RETURN(const std::string payload, NewPayloadKey());
  char z85[kZ85KeyChars + 1];
  if (zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(payload.data()), payload.size()) == nullptr) {
    return Status::Internal("zmq_z85_encode failed for the payload key");
  }
  keys.payload_key = z85;
  return keys;
}

std::string EncodeCurveKeys(const CurveKeys& keys) {
  return keys.server_public + "," + keys.server_secret + "," + keys.client_public + "," + keys.client_secret + "," +
         keys.payload_key;
}

StatusOr<CurveKeys> DecodeCurveKeys(const std::string& text) {
  std::vector<std::string> fields(1);
  for (char c : text) {
    if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back().push_back(c);
    }
  }
  if (fields.size() != 4 && fields.size() != 5) {
    return Status::InvalidArgument(std::string(kCurveKeysVariable) + ": expected 5 comma-separated fields " +
                                   "(server public, server secret, client public, client secret, payload key), got " +
                                   std::to_string(fields.size()));
  }
  CurveKeys keys{fields[0], fields[1], fields[2], fields[3], fields.size() == 5 ? fields[4] : ""};
  PSF_RETURN_IF_ERROR(CheckKey("the payload key", keys.payload_key, false));
  PSF_RETURN_IF_ERROR(CheckKey("the server public key", keys.server_public, true));
  PSF_RETURN_IF_ERROR(CheckKey("the server secret key", keys.server_secret, false));
  PSF_RETURN_IF_ERROR(CheckKey("the client public key", keys.client_public, true));
  PSF_RETURN_IF_ERROR(CheckKey("the client secret key", keys.client_secret, false));
  return keys;
}

StatusOr<std::optional<CurveKeys>> CurveKeysFromEnvironment() {
  const char* text = std::getenv(kCurveKeysVariable);
  if (text == nullptr || *text == '\0') return std::optional<CurveKeys>();
  PSF_ASSIGN_OR_RETURN(CurveKeys keys, DecodeCurveKeys(text));
  return std::optional<CurveKeys>(std::move(keys));
}

std::string CurveKeyBytes(const std::string& z85) {
  PSF_CHECK(z85.size() == kZ85KeyChars);
  std::string raw(kKeyBytes, '\0');
  PSF_CHECK(zmq_z85_decode(reinterpret_cast<uint8_t*>(raw.data()), z85.c_str()) != nullptr);
  return raw;
}

}  // namespace psformer
