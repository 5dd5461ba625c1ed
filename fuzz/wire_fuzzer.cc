// libFuzzer target for the path every received message takes (DESIGN.md, Wire protocol): the
// frames become a RawMessage as a Van delivers it, ParseMessage splits header and payload, the
// server's and the client's validators judge it, and a message either accepts is read as floats
// the way the server and the client then read it (also with the checksum made right, see
// below). Nothing may crash, read out of bounds or hit undefined behaviour, whatever the bytes.
// Built and run by scripts/fuzz.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pserver/wire/message_validator.h"
#include "pserver/wire/wire_message.h"
#include "fuzz/fuzz_frames.h"
#include "fuzz/wire_scope.h"

namespace psformer::fuzz {
namespace {

void ReadPayload(const WireMessage& msg) {
  const uint64_t n = msg.header.end() - msg.header.begin();
  std::vector<float> out(n), acc(n, 1.0f);
  CopyPayloadAsFloats(msg, out.data());
  AddPayloadAsFloats(msg, acc.data());
}

}  // namespace
}  // namespace psformer::fuzz

namespace psformer::fuzz {
namespace {

void Judge(const WireMessage& msg) {
  RejectCounters counters;
  const Verdict at_server = ValidateAtServer(msg, FuzzServerScope());
  if (at_server) {
    counters.Count(at_server->reason);
    (void)at_server->ToString();
  } else if (msg.header.type() == proto::PUSH) {
    ReadPayload(msg);
  }
  const Verdict at_client = ValidateAtClient(msg, FuzzClientScope());
  if (at_client) {
    counters.Count(at_client->reason);
    (void)at_client->ToString();
  } else if (msg.header.type() == proto::PARAMS) {
    ReadPayload(msg);
  }
  (void)counters.ToString();
}

}  // namespace
}  // namespace psformer::fuzz

// protobuf logs an ERROR line for each header whose string field is not UTF-8 (and then refuses
// it, which is what is tested); millions of those lines would drown the fuzzer's own output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace psformer;
  WireMessage msg;
  const Verdict parsed = ParseMessage(fuzz::SplitFrames(data, size), &msg);
  if (parsed) {
    (void)parsed->ToString();
    return 0;
  }
  fuzz::Judge(msg);
  // Mutated payloads almost never match their checksum, which would keep the fuzzer away from
  // the checks after it and from the payload readers; judge the message once more with the
  // checksum made right.
  msg.header.set_payload_crc32c(PayloadCrc32c(msg.payload));
  fuzz::Judge(msg);
  return 0;
}
