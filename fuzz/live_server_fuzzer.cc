// libFuzzer target for a live parameter server: one shard of a small job (2 workers, 2 shards of
// a 40-element vector cut into pieces, checkpoints in a run directory) runs its whole loop
// (ParameterServer::Run) over a sequence of messages the input decides: parsing, validation,
// incarnations, recovery epochs, pushes and their exactly-once bookkeeping, pulls held and
// served, checkpoints, rollbacks and shutdowns, under BSP, SSP or ASYNC, with or without host
// groups. Most messages are made well-formed (this job, this shard, a run of its pieces, a
// payload of the right size and checksum) with fields the input chooses, so that the fuzzer gets
// past the validator into the server's state; some are raw bytes. Nothing may crash, read out of
// bounds or hit undefined behaviour, and a server still serving after the sequence must answer a
// HEARTBEAT. Built and run by scripts/fuzz (--target live_server).
#include <fuzzer/FuzzedDataProvider.h>
#include <google/protobuf/stubs/logging.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/config_loader.h"
#include "common/logging.h"
#include "fuzz/fuzz_frames.h"
#include "pserver/server/parameter_server.h"
#include "pserver/wire/piece_table.h"
#include "pserver/wire/wire_message.h"

namespace psformer::fuzz {
namespace {

constexpr uint64_t kJob = 7;
constexpr uint64_t kTotal = 40;
constexpr int kShard = 1;
const std::vector<uint64_t> kLayerStarts = {10, 25};
constexpr size_t kMaxMessages = 48;

// The messages of the input, one Recv each; the server is stopped once they are all taken.
class ScriptedVan : public Van {
 public:
  explicit ScriptedVan(std::vector<RawMessage> script) : script_(std::move(script)) {}
  StatusOr<std::string> Bind(const std::string&) override { return std::string("inproc://live-server-fuzzer"); }
  Status Connect(const std::string&, const std::string&) override { return Status::Ok(); }
  Status Send(RawMessage message) override {
    SealHeader(message);
    sent.push_back(std::move(message));
    return Status::Ok();
  }
  StatusOr<std::optional<RawMessage>> Recv(int) override {
    if (next_ < script_.size()) return std::optional<RawMessage>(std::move(script_[next_++]));
    if (server != nullptr) server->Stop();
    return std::optional<RawMessage>();
  }
  size_t taken() const { return next_; }

  ParameterServer* server = nullptr;
  std::vector<RawMessage> sent;

 private:
  std::vector<RawMessage> script_;
  size_t next_ = 0;
};

proto::JobConfig FuzzConfig(FuzzedDataProvider& in) {
  proto::JobConfig config;
  FillDefaults(&config);
  auto& c = *config.mutable_cluster();
  c.set_workers(2);
  c.set_servers(2);
  c.set_consistency(static_cast<proto::ClusterConfig::Consistency>(in.ConsumeIntegralInRange<int>(0, 2)));
  c.set_piece_elements(8);
  c.set_frame_bytes(16);
  c.set_spread_layers(in.ConsumeBool());
  if (c.consistency() == proto::ClusterConfig::BSP && in.ConsumeBool()) {
    c.add_host_groups(1);
    c.add_host_groups(1);
  }
  c.set_param_dtype(in.ConsumeBool() ? proto::ClusterConfig::BF16 : proto::ClusterConfig::FP32);
  config.mutable_optimizer()->set_warmup_steps(4);
  config.mutable_checkpoint()->set_every_steps(in.ConsumeIntegralInRange<int>(0, 3));
  config.mutable_checkpoint()->set_every_minutes(0);
  config.mutable_checkpoint()->set_keep_last(2);
  return config;
}

// A message of this job to this shard with fields from the input.
RawMessage MakeMessage(FuzzedDataProvider& in, const PieceTable& table) {
  static const proto::MessageType kTypes[] = {proto::PUSH, proto::PUSH,     proto::PULL,     proto::PULL,
                                             proto::HELLO, proto::HEARTBEAT, proto::CHECKPOINT, proto::SHUTDOWN,
                                             proto::ROLLBACK, proto::ACK,     proto::PARAMS};
  static const proto::Role kRoles[] = {proto::WORKER, proto::WORKER, proto::WORKER, proto::COORDINATOR,
                                      proto::SUPERVISOR, proto::AGGREGATOR, proto::SERVER};
  proto::Header h;
  h.set_type(in.PickValueInArray(kTypes));
  h.set_job_id(in.ConsumeIntegralInRange<int>(0, 15) == 0 ? kJob + 1 : kJob);
  h.set_sender_role(in.PickValueInArray(kRoles));
  h.set_sender_id(in.ConsumeIntegralInRange<uint32_t>(0, 2));
  h.set_shard(in.ConsumeIntegralInRange<int>(0, 7) == 0 ? 0 : kShard);
  h.set_step(in.ConsumeIntegralInRange<int64_t>(-1, 6));
  h.set_incarnation(in.ConsumeIntegralInRange<uint32_t>(0, 2));
  h.set_epoch(in.ConsumeIntegralInRange<uint64_t>(0, 3));
  h.set_sequence(in.ConsumeIntegral<uint32_t>());
  h.set_target_tokens(in.ConsumeIntegralInRange<uint64_t>(0, 100));
  h.set_loss_sum(in.ConsumeFloatingPoint<double>());
  const proto::DType dtypes[] = {proto::FLOAT32, proto::FLOAT32, proto::BFLOAT16, proto::DTYPE_UNSPECIFIED};
  h.set_dtype(in.PickValueInArray(dtypes));
  // A run of the shard's pieces, or now and then any range.
  const int first = table.FirstOf(kShard), end = table.EndOf(kShard);
  const int a = in.ConsumeIntegralInRange<int>(first, end - 1);
  const int b = in.ConsumeIntegralInRange<int>(a + 1, end);
  uint64_t begin = table.pieces()[a].begin, stop = table.pieces()[b - 1].end;
  if (in.ConsumeIntegralInRange<int>(0, 9) == 0) {
    begin = in.ConsumeIntegralInRange<uint64_t>(0, kTotal + 2);
    stop = in.ConsumeIntegralInRange<uint64_t>(0, kTotal + 2);
  }
  h.set_begin(begin);
  h.set_end(stop);
  std::vector<Frame> payload;
  if (h.type() == proto::PUSH || h.type() == proto::PARAMS || in.ConsumeIntegralInRange<int>(0, 15) == 0) {
    const size_t elem = h.dtype() == proto::BFLOAT16 ? 2 : 4;
    size_t bytes = stop > begin ? (stop - begin) * elem : 0;
    if (in.ConsumeIntegralInRange<int>(0, 9) == 0) bytes = in.ConsumeIntegralInRange<size_t>(0, 200);
    // Values the input gives; the rest small and finite.
    std::string data = in.ConsumeBytesAsString(bytes);
    for (size_t i = data.size(); i < bytes; ++i) data.push_back(static_cast<char>(i % 7 == 3 ? 0x3c : 0));
    const size_t cut = elem * in.ConsumeIntegralInRange<size_t>(1, 8);
    for (size_t at = 0; at < data.size(); at += cut) payload.push_back(Frame::Copy(data.substr(at, cut)));
  }
  RawMessage raw = EncodeMessage("worker-peer", std::move(h), std::move(payload));
  raw.peer = in.ConsumeBool() ? "peer-a" : "peer-b";
  return raw;
}

std::vector<RawMessage> Script(FuzzedDataProvider& in, const PieceTable& table) {
  std::vector<RawMessage> script;
  while (script.size() < kMaxMessages && in.remaining_bytes() > 0) {
    if (in.ConsumeIntegralInRange<int>(0, 9) == 0) {
      const std::string bytes = in.ConsumeRandomLengthString(256);
      script.push_back(SplitFrames(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    } else {
      script.push_back(MakeMessage(in, table));
    }
  }
  // A health check last: a server still serving must answer it.
  proto::Header beat;
  beat.set_type(proto::HEARTBEAT);
  beat.set_job_id(kJob);
  beat.set_sender_role(proto::COORDINATOR);
  beat.set_shard(kShard);
  beat.set_sequence(0xbeef);
  script.push_back(EncodeMessage("health", std::move(beat), {}));
  return script;
}

bool AnsweredHealthCheck(const std::vector<RawMessage>& sent) {
  for (const RawMessage& m : sent) {
    WireMessage reply;
    if (m.peer == "health" && !ParseMessage(m, &reply) && reply.header.type() == proto::HEARTBEAT &&
        reply.header.sequence() == 0xbeef) {
      return true;
    }
  }
  return false;
}

const std::string& RunDir() {
  static const std::string dir = [] {
    char pattern[] = "/tmp/psformer-live-server-fuzz-XXXXXX";
    static char made[sizeof(pattern)];  // outlives every static string, for the exit handler
    std::memcpy(made, pattern, sizeof(pattern));
    if (mkdtemp(made) == nullptr) abort();
    // Gone when the fuzzer exits (libFuzzer ends with exit() once its time is up).
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(made, ec);
    });
    return std::string(made);
  }();
  return dir;
}

}  // namespace
}  // namespace psformer::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  psformer::SetLogLevel(psformer::LogLevel::kError);  // refusals are the point, not news
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace psformer;
  FuzzedDataProvider in(data, size);
  ParameterServerOptions o;
  o.config = fuzz::FuzzConfig(in);
  o.shard = fuzz::kShard;
  o.parameter_count = fuzz::kTotal;
  o.job_id = fuzz::kJob;
  o.layer_starts = fuzz::kLayerStarts;
  o.threads = 1;
  o.poll_ms = 0;
  o.run_dir = fuzz::RunDir();
  o.resume = in.ConsumeBool();
  o.incarnation = in.ConsumeIntegralInRange<uint32_t>(0, 1);
  o.init = [](uint64_t b, uint64_t e, float* out) {
    for (uint64_t i = b; i < e; ++i) out[i - b] = 0.01f * static_cast<float>(i);
  };
  const PieceTable table = JobPieceTable(o.config, fuzz::kTotal, fuzz::kLayerStarts);
  std::vector<RawMessage> messages = fuzz::Script(in, table);
  const size_t count = messages.size();
  auto van = std::make_unique<fuzz::ScriptedVan>(std::move(messages));
  fuzz::ScriptedVan* script = van.get();
  auto server = ParameterServer::Create(std::move(o), std::move(van));
  if (!server.ok()) return 0;  // a checkpoint of another job's shape in the run directory, say
  script->server = server->get();
  const Status ran = (*server)->Run();
  // A server that took the whole script (the job did not end it first) answered the health check.
  if (ran.ok() && script->taken() == count && !fuzz::AnsweredHealthCheck(script->sent)) {
    std::fprintf(stderr, "live_server_fuzzer: the server took the health check and did not answer it\n");
    abort();
  }
  return 0;
}
