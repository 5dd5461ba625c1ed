// libFuzzer target for the path every received message takes (docs/wire-protocol.md): the
// frames become a RawMessage as a Van delivers it, ParseMessage splits header and payload, the
// server's and the client's validators judge it, and a message either accepts is read the way
// that side then reads it: a push as the server sums it, a PARAMS reply landed by the client's
// PullLanding (also with the checksum made right, see below). Nothing may crash, read out of bounds or hit undefined
// behaviour, whatever the bytes. Built and run by scripts/fuzz.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/logging.h"
#include "fuzz/fuzz_frames.h"
#include "fuzz/wire_scope.h"
#include "pserver/client/pull_landing.h"
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

// An accepted DENSE push that names rows, read as a server reads it: its table kept apart, the
// values after it as a whole piece's.
void ReadNamedDense(const WireMessage& msg) {
  RunTable table;
  PSF_CHECK(!ParseRunTable(msg, &table));  // the validator parsed it already
  (void)MergedRuns(table.runs);
  WireMessage values = msg;
  values.payload = table.values.payload;
  ReadPayload(values);
}

// An accepted PARAMS reply landed as the client lands it (a part of a split piece by its run
// table), into floats and, for bf16, as it came; the second time with the piece's CRC made; the
// third left where it came (a whole piece: checked, then read span by span as an upload reads it).
void LandParams(const WireMessage& msg) {
  const uint64_t n = msg.header.end() - msg.header.begin();
  std::vector<float> params(n, 0.0f);
  std::vector<uint16_t> params_bf16(n, 0);
  PullLanding::Job job;
  job.msg = msg;
  job.params = params.data();
  (void)PullLanding::LandNow(job, 1);
  job.params_bf16 = params_bf16.data();
  job.piece_crc = true;
  (void)PullLanding::LandNow(job, 2);
  job.piece_crc = false;
  job.lend = true;
  job.params = msg.header.dtype() == proto::FLOAT32 ? params.data() : nullptr;
  job.params_bf16 = msg.header.dtype() == proto::FLOAT32 ? nullptr : params_bf16.data();
  const PullLanding::Landed lent = PullLanding::LandNow(job, 2);
  if (lent.lent == nullptr) return;
  uint64_t seen = 0;
  uint8_t sink = 0;
  lent.lent->ForEachSpan(0, n, [&](uint64_t at, const uint8_t* bytes, uint64_t count) {
    PSF_CHECK(at == seen);  // in order, end to end
    if (count > 0) sink ^= bytes[0] ^ bytes[count * lent.lent->element_bytes - 1];
    seen += count;
  });
  PSF_CHECK(seen == lent.lent->size() && seen == n);  // the whole piece
  (void)sink;
}

// Whether one side accepts the message; a refusal is counted and described.
bool Accepts(const Refusal& verdict, RejectCounters* counters) {
  if (!verdict) return true;
  counters->Count(verdict->reason);
  (void)verdict->ToString();
  return false;
}

// Each side judges the message, and reads what it accepts the way that side reads it.
void Judge(const WireMessage& msg) {
  RejectCounters counters;
  const proto::Header& h = msg.header;
  if (Accepts(ValidateAtServer(msg, FuzzServerScope()), &counters) && h.type() == proto::PUSH) ReadPayload(msg);
  // A job that splits the embedding: ROWS pushes read by their run table, DENSE ones that name
  // rows after their table, the others as any.
  if (Accepts(ValidateAtServer(msg, FuzzSplitServerScope()), &counters) && h.type() == proto::PUSH) {
    if (h.part() == proto::ROWS) {
      ReadRows(msg);
    } else if (h.part() == proto::DENSE && h.named()) {
      ReadNamedDense(msg);
    } else {
      ReadPayload(msg);
    }
  }
  if (Accepts(ValidateAtClient(msg, FuzzClientScope()), &counters) && h.type() == proto::PARAMS) LandParams(msg);
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
