// libFuzzer target for the path every received message takes (docs/wire-protocol.md): the
// frames become a RawMessage as a Van delivers it, ParseMessage splits header and payload, the
// server's and the client's validators judge it, and a message either accepts is read as floats
// the way the server and the client then read it (also with the checksum made right, see
// below). Nothing may crash, read out of bounds or hit undefined behaviour, whatever the bytes.
// Built and run by scripts/fuzz.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/logging.h"
#include "fuzz/fuzz_frames.h"
#include "fuzz/wire_scope.h"
#include "pserver/wire/gradient_rows.h"
#include "pserver/wire/message_validator.h"
#include "pserver/wire/wire_message.h"

namespace psformer::fuzz {
namespace {

void ReadPayload(const WireMessage& msg) {
  const uint64_t n = msg.header.end() - msg.header.begin();
  std::vector<float> out(n), acc(n, 1.0f);
  CopyPayloadAsFloats(msg, out.data());
  AddPayloadRange(msg, 0, n, acc.data());
  if (n > 2) AddPayloadRange(msg, 1, n - 1, acc.data(), /*assign=*/true);
}

// An accepted ROWS push read as a server (and a host group's aggregator) reads it.
void ReadRows(const WireMessage& msg) {
  RowsGradient rows;
  PSF_CHECK(!ParseRows(msg, &rows));  // the validator parsed it already
  const uint64_t n = msg.header.end() - msg.header.begin();
  std::vector<float> acc(n, 1.0f);
  const std::vector<const RowsGradient*> parts = {&rows, &rows};
  AddRowsInOrder(parts, 0, n, acc.data());
  if (n > 2) AddRowsInOrder(parts, 1, n - 1, acc.data() + 1);
  (void)SumRows(parts);
}

// One side's verdict: a refusal is counted and described; an accepted message of the type that
// side reads the payload of (`payload_type`) has it read.
void JudgeAt(const Refusal& verdict, const WireMessage& msg, proto::MessageType payload_type,
             RejectCounters* counters) {
  if (verdict) {
    counters->Count(verdict->reason);
    (void)verdict->ToString();
  } else if (msg.header.type() == payload_type) {
    ReadPayload(msg);
  }
}

void Judge(const WireMessage& msg) {
  RejectCounters counters;
  JudgeAt(ValidateAtServer(msg, FuzzServerScope()), msg, proto::PUSH, &counters);
  // A job that splits the embedding: DENSE pushes read as any, ROWS pushes by their run table.
  if (const Refusal split = ValidateAtServer(msg, FuzzSplitServerScope())) {
    counters.Count(split->reason);
  } else if (msg.header.type() == proto::PUSH && msg.header.part() == proto::ROWS) {
    ReadRows(msg);
  } else if (msg.header.type() == proto::PUSH) {
    ReadPayload(msg);
  }
  JudgeAt(ValidateAtClient(msg, FuzzClientScope()), msg, proto::PARAMS, &counters);
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
  const Refusal parsed = ParseMessage(fuzz::SplitFrames(data, size), &msg);
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
