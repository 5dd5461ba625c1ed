// Writes the wire fuzzer's seed corpus: one file per valid message of the fuzz job (wire_scope.h),
// each type a server or a client accepts, payloads in fp32 and bf16 split over several frames.
// usage: wire_seed_corpus DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "fuzz/fuzz_frames.h"
#include "fuzz/wire_scope.h"
#include "pserver/wire/gradient_rows.h"
#include "pserver/wire/message_validator.h"
#include "pserver/wire/wire_message.h"

namespace psformer::fuzz {
namespace {

proto::Header Header(proto::MessageType type, proto::Role role, uint32_t sender) {
  proto::Header h;
  h.set_type(type);
  h.set_job_id(kJobId);
  h.set_sender_role(role);
  h.set_sender_id(sender);
  h.set_shard(kShard);
  h.set_step(1);
  h.set_sequence(7);
  return h;
}

// `elements` values of `bytes_per` bytes each, cut into frames of at most `frame_bytes`.
std::vector<Frame> Payload(uint64_t elements, size_t bytes_per, size_t frame_bytes) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(elements * bytes_per);
  for (size_t i = 0; i < bytes->size(); ++i) (*bytes)[i] = static_cast<uint8_t>(i * 37 + 11);
  std::vector<Frame> frames;
  AppendViewFrames(bytes->data(), bytes->size(), frame_bytes, bytes_per, bytes, &frames);
  return frames;
}

// A run table frame, then `values` fp32 values in frames of at most `frame_bytes`.
std::vector<Frame> Tabled(const std::vector<ElementRun>& runs, uint64_t values, size_t frame_bytes) {
  std::vector<Frame> frames = {Frame::Copy(runs.data(), runs.size() * kRunBytes)};
  for (Frame& f : Payload(values, 4, frame_bytes)) frames.push_back(std::move(f));
  return frames;
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: wire_seed_corpus DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  const ShardRange r = ShardOf(kTotal, kShards, kShard);
  std::vector<std::pair<std::string, RawMessage>> seeds;
  proto::Header push = Header(proto::PUSH, proto::WORKER, 1);
  push.set_begin(r.begin);
  push.set_end(r.end);
  push.set_dtype(proto::FLOAT32);
  push.set_target_tokens(12);
  seeds.emplace_back("push_fp32", EncodeMessage("s", push, Payload(r.size(), 4, 32)));
  push.set_dtype(proto::BFLOAT16);
  seeds.emplace_back("push_bf16", EncodeMessage("s", push, Payload(r.size(), 2, 8)));
  proto::Header pull = Header(proto::PULL, proto::WORKER, 0);
  pull.set_begin(r.begin);
  pull.set_end(r.end);
  seeds.emplace_back("pull", EncodeMessage("s", pull, {}));
  seeds.emplace_back("hello", EncodeMessage("s", Header(proto::HELLO, proto::WORKER, 0), {}));
  seeds.emplace_back("heartbeat", EncodeMessage("s", Header(proto::HEARTBEAT, proto::SUPERVISOR, 0), {}));
  seeds.emplace_back("checkpoint", EncodeMessage("s", Header(proto::CHECKPOINT, proto::COORDINATOR, 0), {}));
  proto::Header params = Header(proto::PARAMS, proto::SERVER, kShard);
  params.set_begin(r.begin);
  params.set_end(r.end);
  params.set_dtype(proto::FLOAT32);
  seeds.emplace_back("params", EncodeMessage("s", params, Payload(r.size(), 4, 16)));
  proto::Header ack = Header(proto::ACK, proto::SERVER, kShard);
  ack.set_duplicate(true);
  seeds.emplace_back("ack", EncodeMessage("s", ack, {}));
  proto::Header error = Header(proto::ERROR, proto::SERVER, kShard);
  error.set_error("bad checksum: seed");
  error.set_reject_reason(8);
  seeds.emplace_back("error", EncodeMessage("s", error, {}));
  // The two parts of a split piece's push (FuzzSplitServerScope: [20, 30) is split).
  std::vector<std::pair<std::string, RawMessage>> split_seeds;
  proto::Header dense = push;
  dense.set_dtype(proto::FLOAT32);
  dense.set_end(r.begin + 10);
  dense.set_part(proto::DENSE);
  split_seeds.emplace_back("push_dense", EncodeMessage("s", dense, Payload(10, 4, 16)));
  // The runs [1, 4) and [6, 8) of the piece's 10 elements: 5 named.
  const std::vector<ElementRun> runs = {{1, 3}, {6, 2}};
  proto::Header rows = dense;
  rows.set_part(proto::ROWS);
  rows.set_runs(runs.size());
  split_seeds.emplace_back("push_rows", EncodeMessage("s", rows, Tabled(runs, 5, 12)));
  // A DENSE push that names its rows first: the table, then the whole piece's values.
  proto::Header named = dense;
  named.set_named(true);
  named.set_runs(runs.size());
  split_seeds.emplace_back("push_dense_named", EncodeMessage("s", named, Tabled(runs, 10, 16)));
  // The split piece's pull answered in two parts: its rows, then the other elements.
  proto::Header params_rows = params;
  params_rows.set_end(r.begin + 10);
  params_rows.set_part(proto::ROWS);
  params_rows.set_runs(runs.size());
  seeds.emplace_back("params_rows", EncodeMessage("s", params_rows, Tabled(runs, 5, 12)));
  proto::Header params_dense = params_rows;
  params_dense.set_part(proto::DENSE);
  seeds.emplace_back("params_dense", EncodeMessage("s", params_dense, Tabled(runs, 5, 12)));
  const size_t plain = seeds.size();
  for (auto& seed : split_seeds) seeds.push_back(std::move(seed));
  for (size_t i = 0; i < seeds.size(); ++i) {
    const auto& [name, raw] = seeds[i];
    // Each seed must be what it claims: accepted by its receiver.
    WireMessage msg;
    const RawMessage copy = raw;
    if (ParseMessage(copy, &msg)) return std::cerr << name << ": does not parse\n", 1;
    const bool to_client = msg.header.sender_role() == proto::SERVER;
    const Refusal v = to_client ? ValidateAtClient(msg, FuzzClientScope())
                                : ValidateAtServer(msg, i < plain ? FuzzServerScope() : FuzzSplitServerScope());
    if (v) return std::cerr << name << ": refused: " << v->ToString() << "\n", 1;
    std::ofstream(dir / name, std::ios::binary) << JoinFrames(raw);
  }
  std::cout << seeds.size() << " seeds in " << dir.string() << "\n";
  return 0;
}

}  // namespace
}  // namespace psformer::fuzz

int main(int argc, char** argv) { return psformer::fuzz::Main(argc, argv); }
