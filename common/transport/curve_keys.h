// The job's CURVE keys (ZeroMQ's CurveZMQ mechanism): one server keypair shared by every server
// shard and one client keypair shared by every worker and control client. A server admits only
// the job's client public key (zap_handler.h); a client trusts only the job's server public key.
// So a process outside the job, which never saw the keys, can neither talk to a server nor pose
// as one, and the traffic of the job is encrypted.
//
// Keys are Z85 text (40 characters for 32 bytes). They travel from the launcher to role processes
// in the environment variable PSFORMER_CURVE_KEYS (never on the command line, which every user of
// the machine can read in `ps`), as "SERVER_PUBLIC,SERVER_SECRET,CLIENT_PUBLIC,CLIENT_SECRET,PAYLOAD"
// (',' is not a Z85 character). A role gets only its own secret: the other field is empty.
// PAYLOAD is the job's key for sealing payloads with AES-256-GCM instead of CURVE (every role).
#ifndef PSFORMER_COMMON_TRANSPORT_CURVE_KEYS_H_
#define PSFORMER_COMMON_TRANSPORT_CURVE_KEYS_H_

#include <optional>
#include <string>

#include "common/status.h"

namespace psformer {

constexpr char kCurveKeysVariable[] = "PSFORMER_CURVE_KEYS";

struct CurveKeys {
  std::string server_public;  // Z85; every process of the job.
  std::string server_secret;  // Z85; servers only (empty elsewhere).
  std::string client_public;  // Z85; every process of the job (servers admit exactly this key).
  std::string client_secret;  // Z85; clients only (empty elsewhere).
  // Z85 of 32 random bytes; every process of the job: the key payloads are sealed under with
  // cluster.encryption = AES_256_GCM (payload_sealer.h). Empty in keys made before it existed.
  std::string payload_key;

  // What a server keeps: no client secret.
  CurveKeys ForServer() const { return {server_public, server_secret, client_public, "", payload_key}; }
  // What a client keeps: no server secret.
  CurveKeys ForClient() const { return {server_public, "", client_public, client_secret, payload_key}; }
};

// True where libzmq was built with CURVE (libsodium or its bundled TweetNaCl).
bool CurveAvailable();

// Two fresh keypairs (zmq_curve_keypair) and a fresh payload key. Fails where libzmq has no CURVE.
StatusOr<CurveKeys> GenerateCurveKeys();

// "SP,SS,CP,CS" (see the header comment).
std::string EncodeCurveKeys(const CurveKeys& keys);
// Parses EncodeCurveKeys text; every non-empty field must be a valid 40-character Z85 key, the
// two public keys must be present. Errors name the field and say what is wrong (never the key).
StatusOr<CurveKeys> DecodeCurveKeys(const std::string& text);

// The keys in PSFORMER_CURVE_KEYS; nullopt when the variable is unset or empty.
StatusOr<std::optional<CurveKeys>> CurveKeysFromEnvironment();

// 32 raw bytes of a Z85 key. REQUIRES: a key DecodeCurveKeys accepted.
std::string CurveKeyBytes(const std::string& z85);

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_CURVE_KEYS_H_
