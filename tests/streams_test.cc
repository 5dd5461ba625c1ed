// Several connections per peer (ZmqVanOptions::streams, cluster.streams): payloads take them in
// turn, requests without payload keep to the first, and every message is answered on the
// connection it came on, with CURVE as without; over ipc:// one connection stays one. A BSP job
// whose client uses four streams ends with the same bits as with one.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common/transport/curve_keys.h"
#include "common/transport/zmq_van.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"
#include "tests/van_test_util.h"

namespace psformer::testing {
namespace {

RawMessage Message(const std::string& peer, const std::string& header, size_t payload_bytes) {
  RawMessage m;
  m.peer = peer;
  m.frames.push_back(Frame::Copy(header.data(), header.size()));
  if (payload_bytes > 0) m.frames.push_back(Frame::Copy(std::string(payload_bytes, 'x').data(), payload_bytes));
  return m;
}

// Binds `server` at `endpoint` and connects `client` to it, then sends 9 payloads and 3 requests
// without payload over the client's connections; returns the routing ids the server saw for each
// kind, after answering every message and checking that each answer reaches the client.
void Exchange(ZmqVan& server, ZmqVan& client, const std::string& endpoint, std::set<std::string>* payload_ids,
              std::set<std::string>* request_ids) {
  auto bound = server.Bind(endpoint);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  ASSERT_TRUE(client.Connect("srv", *bound).ok());
  for (int i = 0; i < 12; ++i) {
    const bool payload = i % 4 != 3;
    std::string header = "m";
    header += std::to_string(i);
    ASSERT_TRUE(client.Send(Message("srv", header, payload ? 1000 : 0)).ok());
  }
  for (int i = 0; i < 12; ++i) {
    RawMessage in = RecvOne(server);
    ASSERT_FALSE(in.frames.empty());
    (in.frames.size() > 1 ? payload_ids : request_ids)->insert(in.peer);
    ASSERT_TRUE(server.Send(Message(in.peer, "re:" + std::string(in.frames[0].bytes()), 0)).ok());
  }
  std::set<std::string> answered;
  for (int i = 0; i < 12; ++i) {
    RawMessage back = RecvOne(client);
    EXPECT_EQ(back.peer, "srv");
    ASSERT_EQ(back.frames.size(), 1u);
    answered.insert(std::string(back.frames[0].bytes()));
  }
  EXPECT_EQ(answered.size(), 12u) << "every message answered once, on its own connection";
}

TEST(Streams, PayloadsTakeEveryConnectionInTurnAndRequestsTheFirst) {
  ZmqVan server;
  ZmqVanOptions o;
  o.streams = 3;
  o.io_threads = 3;
  ZmqVan client(o);
  std::set<std::string> payload_ids, request_ids;
  Exchange(server, client, "tcp://127.0.0.1:0", &payload_ids, &request_ids);
  EXPECT_EQ(payload_ids.size(), 3u) << "the payloads used every connection";
  EXPECT_EQ(request_ids.size(), 1u) << "requests without payload keep to one connection";
  EXPECT_EQ(payload_ids.count(*request_ids.begin()), 1u);
}

TEST(Streams, EveryConnectionIsAuthenticatedWithCurve) {
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ZmqVanOptions so;
  so.curve = keys->ForServer();
  ZmqVan server(so);
  ZmqVanOptions co;
  co.curve = keys->ForClient();
  co.streams = 4;
  co.io_threads = 4;
  ZmqVan client(co);
  std::set<std::string> payload_ids, request_ids;
  Exchange(server, client, "tcp://127.0.0.1:0", &payload_ids, &request_ids);
  EXPECT_EQ(payload_ids.size(), 4u);
  EXPECT_EQ(server.refused_clients(), 0u);
}

TEST(Streams, AnIpcPeerGetsOneConnection) {
  TempDir dir;
  ZmqVan server;
  ZmqVanOptions o;
  o.streams = 3;
  ZmqVan client(o);
  std::set<std::string> payload_ids, request_ids;
  Exchange(server, client, "ipc://" + dir.File("s.sock"), &payload_ids, &request_ids);
  EXPECT_EQ(payload_ids.size(), 1u);
}

// Three BSP steps of two workers, one with four streams to each of two servers: the same bits as
// with one stream each (pieces arrive in another order; each is applied once, summed in worker
// order).
std::vector<float> TrainThreeSteps(int streams) {
  constexpr uint64_t kTotal = 3000;
  proto::JobConfig config = PsConfig(2, 2, proto::ClusterConfig::BSP);
  config.mutable_cluster()->set_piece_elements(256);
  ServerGroup group(config, kTotal);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < 2; ++w) {
    PsClientOptions o;
    o.job_id = kJobId;
    o.id = static_cast<uint32_t>(w);
    o.servers = group.endpoints();
    o.parameter_count = kTotal;
    o.frame_bytes = 1024;
    o.timeout_ms = 20000;
    o.pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, {}));
    ZmqVanOptions zo;
    zo.streams = w == 0 ? streams : 1;
    zo.io_threads = zo.streams;
    auto client = PsClient::Create(std::move(o), std::make_unique<ZmqVan>(zo));
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    if (!client.ok()) return {};
    clients.push_back(std::move(client).value());
  }
  std::vector<std::vector<float>> params(2, std::vector<float>(kTotal));
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<PsClient::Ticket> pushes;
    std::vector<std::vector<float>> grads(2, std::vector<float>(kTotal));
    for (int w = 0; w < 2; ++w) {
      for (uint64_t i = 0; i < kTotal; ++i) grads[w][i] = std::sin(0.001f * (i + 1) * (w + 1) * step);
      pushes.push_back(*clients[w]->Push(step, grads[w].data(), 10 + w, 1.0));
    }
    for (int w = 0; w < 2; ++w) {
      EXPECT_TRUE(clients[w]->Wait(pushes[w]).ok());
      EXPECT_TRUE(clients[w]->Wait(*clients[w]->Pull(step, params[w].data())).ok());
    }
    EXPECT_EQ(params[0], params[1]) << "both workers see the same parameters after step " << step;
  }
  return params[0];
}

TEST(Streams, ABspJobOverFourStreamsEndsWithTheSameBitsAsOverOne) {
  const std::vector<float> one = TrainThreeSteps(1);
  const std::vector<float> four = TrainThreeSteps(4);
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(one, four);
}

}  // namespace
}  // namespace psformer::testing
