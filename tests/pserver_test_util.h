// Helpers for parameter-server tests: a config, servers running on threads over loopback, and
// an independent reference of the BSP update (AdamUpdate over the whole vector).
#ifndef PSFORMER_TESTS_PSERVER_TEST_UTIL_H_
#define PSFORMER_TESTS_PSERVER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/adam.h"
#include "common/bfloat16.h"
#include "common/config_loader.h"
#include "common/host_groups.h"
#include "common/lr_schedule.h"
#include "common/transport/forwarding_van.h"
#include "common/transport/shm_van.h"
#include "common/transport/zmq_van.h"
#include "pserver/client/ps_client.h"
#include "pserver/server/parameter_server.h"
#include "pserver/wire/wire_message.h"

namespace psformer::testing {

constexpr uint64_t kJobId = 0x5eed;

inline proto::JobConfig PsConfig(int workers, int servers, proto::ClusterConfig::Consistency mode) {
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_cluster()->set_workers(workers);
  config.mutable_cluster()->set_servers(servers);
  config.mutable_cluster()->set_consistency(mode);
  config.mutable_cluster()->set_frame_bytes(4096);  // several frames per shard even in small tests.
  config.mutable_optimizer()->set_warmup_steps(4);
  config.mutable_checkpoint()->set_every_minutes(0);
  return config;
}

// A header with what every message names: its type, its job, who sends it and to which shard.
inline proto::Header MessageHeader(proto::MessageType type, uint64_t job_id, proto::Role role, uint32_t sender,
                                   uint32_t shard) {
  proto::Header h;
  h.set_type(type);
  h.set_job_id(job_id);
  h.set_sender_role(role);
  h.set_sender_id(sender);
  h.set_shard(shard);
  return h;
}

// The next message `van` receives, parsed (a failure when none comes within 10 s).
inline WireMessage NextReply(Van& van) {
  for (int i = 0; i < 100; ++i) {
    auto r = van.Recv(100);
    if (!r.ok() || !r->has_value()) continue;
    WireMessage msg;
    EXPECT_FALSE(ParseMessage(std::move(**r), &msg));
    return msg;
  }
  ADD_FAILURE() << "no reply within 10 s";
  return {};
}

// A request of this job from worker 0 to shard 0.
inline proto::Header FromWorker0(proto::MessageType type, int64_t step) {
  proto::Header h = MessageHeader(type, kJobId, proto::WORKER, 0, 0);
  h.set_step(step);
  return h;
}

inline float InitValue(uint64_t i) { return 0.05f * std::sin(0.37f * static_cast<float>(i)); }

// Gradient of worker w at step t: reproducible, different per (w, t).   (n)
inline std::vector<float> Gradient(int w, int64_t t, size_t n) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * t + w));
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> g(n);
  for (float& x : g) x = dist(rng);
  return g;
}

// A Van whose first `refuse` messages with a payload from a peer whose name begins with `from`
// ("" = any peer) arrive as a shared-memory descriptor that ShmVan could not honour
// (RawMessage::refused_segment), as when a server's segment is broken.
class RefusingVan : public ForwardingVan {
 public:
  static constexpr const char* kSegment = "/psformer-5eed-1234-00c0ffee-0";
  explicit RefusingVan(int refuse, std::string from = "")
      : ForwardingVan(std::make_unique<ZmqVan>()), left_(refuse), from_(std::move(from)) {}
  StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) override {
    auto r = inner_->Recv(timeout_ms);
    if (r.ok() && r->has_value() && (*r)->frames.size() > 1 && (*r)->peer.rfind(from_, 0) == 0 && left_ > 0) {
      --left_;
      (*r)->transport_error = std::string("slot 5 of ") + kSegment + " holds no payload of generation 15";
      (*r)->refused_segment = kSegment;
    }
    return r;
  }

 private:
  int left_;
  std::string from_;
};
inline uint64_t Tokens(int w, int64_t t) { return static_cast<uint64_t>(10 + 3 * w + t); }

// Servers of one job, each Run on its own thread.
class ServerGroup {
 public:
  // `layer_starts`: cuts of the pieces (JobPieceTable), as the pserver command passes the layout's.
  // `ipc_dir` non-empty: each server also listens at ipc://ipc_dir/server-K.sock with a ShmVan
  // (same-host shared memory), and endpoints() are those.
  ServerGroup(const proto::JobConfig& config, uint64_t total, const std::string& run_dir = "", bool resume = false,
              int threads = 2, const std::vector<uint64_t>& layer_starts = {}, const std::string& ipc_dir = "") {
    for (int k = 0; k < config.cluster().servers(); ++k) {
      ParameterServerOptions o;
      o.config = config;
      o.shard = k;
      o.parameter_count = total;
      o.job_id = kJobId;
      o.run_dir = run_dir;
      o.resume = resume;
      o.threads = threads;
      o.poll_ms = 20;
      o.layer_starts = layer_starts;
      o.init = [](uint64_t b, uint64_t e, float* out) {
        for (uint64_t i = b; i < e; ++i) out[i - b] = InitValue(i);
      };
      std::unique_ptr<Van> van = std::make_unique<ZmqVan>();
      std::string ipc;
      if (!ipc_dir.empty()) {
        ShmVanOptions shm;
        shm.job_id = kJobId;
        shm.ipc_endpoint = ipc = "ipc://" + ipc_dir + "/server-" + std::to_string(k) + ".sock";
        van = std::make_unique<ShmVan>(std::move(van), shm);
      }
      auto server = ParameterServer::Create(std::move(o), std::move(van));
      EXPECT_TRUE(server.ok()) << server.status().ToString();
      if (!server.ok()) return;
      endpoints_.push_back(ipc.empty() ? server.value()->endpoint() : ipc);
      servers_.push_back(std::move(server).value());
    }
    for (auto& s : servers_) {
      threads_.emplace_back([server = s.get()] { EXPECT_TRUE(server->Run().ok()); });
    }
  }
  ~ServerGroup() {
    for (auto& s : servers_) s->Stop();
    for (auto& t : threads_) t.join();
  }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  ParameterServer& server(int k) { return *servers_[k]; }

 private:
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::string> endpoints_;
  std::vector<std::thread> threads_;
};

inline std::unique_ptr<PsClient> MakeClient(const ServerGroup& group, uint64_t total, int worker,
                                            proto::DType dtype = proto::FLOAT32, uint32_t incarnation = 0,
                                            proto::Role role = proto::WORKER,
                                            std::shared_ptr<const PieceTable> pieces = nullptr,
                                            bool pull_digest = true) {
  PsClientOptions o;
  o.pieces = std::move(pieces);
  o.pull_digest = pull_digest;
  o.job_id = kJobId;
  o.role = role;
  o.id = static_cast<uint32_t>(worker);
  o.incarnation = incarnation;
  o.servers = group.endpoints();
  o.parameter_count = total;
  o.frame_bytes = 4096;
  o.gradient_dtype = dtype;
  o.timeout_ms = 20000;
  o.io_threads = 1;
  auto client = PsClient::Create(std::move(o));
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(client).value() : nullptr;
}

// A client of `group` over same-host shared memory: payload frames of `threshold_bytes` and more
// go through its ShmVan (*van, for its stats), smaller ones inline.
inline std::unique_ptr<PsClient> MakeShmClient(const ServerGroup& group, uint64_t total, int worker,
                                               uint64_t threshold_bytes, ShmVan** van,
                                               proto::DType dtype = proto::FLOAT32,
                                               std::shared_ptr<const PieceTable> pieces = nullptr) {
  PsClientOptions o;
  o.pieces = std::move(pieces);
  o.job_id = kJobId;
  o.id = static_cast<uint32_t>(worker);
  o.servers = group.endpoints();
  o.parameter_count = total;
  o.frame_bytes = 4096;
  o.gradient_dtype = dtype;
  o.timeout_ms = 20000;
  ShmVanOptions shm;
  shm.job_id = kJobId;
  shm.threshold_bytes = threshold_bytes;
  auto shm_van = std::make_unique<ShmVan>(std::make_unique<ZmqVan>(), shm);
  *van = shm_van.get();
  auto client = PsClient::Create(std::move(o), std::move(shm_van));
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(client).value() : nullptr;
}

// The BSP update computed directly on the whole vector: sum in worker order (with host groups,
// common/host_groups.h: each group's gradients in worker order, then the groups' sums in group
// order), normalise by the step's tokens, AdamUpdate with the schedule. Independent of servers,
// aggregators, sockets and sharding.
class ReferenceTrainer {
 public:
  ReferenceTrainer(const proto::JobConfig& config, size_t n, bool bf16 = false)
      : config_(config), bf16_(bf16), params_(n), m_(n), v_(n) {
    for (size_t i = 0; i < n; ++i) params_[i] = InitValue(i);
  }
  void Step(int64_t t) {
    const HostGroups groups = HostGroups::Of(config_);
    const std::vector<int> sizes = groups.summing() ? groups.sizes() : std::vector<int>{config_.cluster().workers()};
    std::vector<float> sum;
    uint64_t tokens = 0;
    int w = 0;
    for (int size : sizes) {
      std::vector<float> group;
      for (const int end = w + size; w < end; ++w) {
        std::vector<float> g = Gradient(w, t, params_.size());
        if (bf16_) {
          for (float& x : g) x = Bf16ToFloat(FloatToBf16(x));
        }
        AddInto(&group, g);
        tokens += Tokens(w, t);
      }
      AddInto(&sum, group);
    }
    NormalizeGradient(sum.size(), tokens, sum.data());
    AdamHyper hyper{config_.optimizer().beta1(), config_.optimizer().beta2(), config_.optimizer().epsilon()};
    AdamUpdate(hyper, t, LearningRate(config_, t), sum.size(), sum.data(), params_.data(), m_.data(), v_.data());
  }
  const std::vector<float>& params() const { return params_; }

 private:
  // sum += g, where an empty sum starts as g itself (not 0 + g).
  static void AddInto(std::vector<float>* sum, const std::vector<float>& g) {
    if (sum->empty()) {
      *sum = g;
      return;
    }
    for (size_t i = 0; i < g.size(); ++i) (*sum)[i] += g[i];
  }

  proto::JobConfig config_;
  bool bf16_;
  std::vector<float> params_, m_, v_;  // (n)
};

// Waits on each client's ticket in turn (clients[w] on tickets[w]); each must end well.
inline void ExpectEachEndsWell(std::vector<std::unique_ptr<PsClient>>& clients,
                               const std::vector<PsClient::Ticket>& tickets) {
  for (size_t w = 0; w < clients.size(); ++w) {
    const Status s = clients[w]->Wait(tickets[w]);
    EXPECT_TRUE(s.ok()) << "client " << w << ": " << s.ToString();
  }
}

// Bitwise equality with the first differing index in the message.
inline ::testing::AssertionResult BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_PSERVER_TEST_UTIL_H_
