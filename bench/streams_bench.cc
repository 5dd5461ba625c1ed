// Benchmark: one worker's push + pull of a base-sized parameter vector (in the job's 16 MiB
// pieces) through one parameter server over loopback TCP, with 1, 2 and 4 connections per
// worker-server pair (cluster.streams), with and without CURVE, side by side in one run. Each
// connection works on an I/O thread of its own on both sides, so CURVE's encryption of one pair
// can use several cores. Results and the machine go to bench/RESULTS.md ("Streams").
//   build/bench/streams_bench [--params N] [--iters K] [--threads T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench/pserver_bench.h"
#include "common/config_loader.h"
#include "common/logging.h"
#include "common/transport/curve_keys.h"
#include "common/transport/zmq_van.h"
#include "pserver/client/ps_client.h"
#include "pserver/server/parameter_server.h"
#include "pserver/wire/piece_table.h"

namespace psformer {
namespace {

struct Args {
  uint64_t params = 63'000'000;
  int iters = 4;
  int threads = 2;  // the server's update threads
};

Args Parse(int argc, char** argv) {
  Args a;
  ReadNumericFlags(argc, argv, {{"--params", &a.params}, {"--iters", &a.iters}, {"--threads", &a.threads}});
  return a;
}

struct Timing {
  double round_trip = 1e30;  // best push + pull
  double push = 1e30;        // best push alone (until every piece is acknowledged)
};

enum class Security { kNone, kCurve, kAesGcm };

// A van of `streams` connections with `security`: CURVE with the server's or the client's keys,
// or payloads sealed with AES-GCM under the job's payload key on `seal_threads` threads.
std::unique_ptr<ZmqVan> SecuredVan(ZmqVanOptions o, Security security, bool server, int seal_threads) {
  static const CurveKeys keys = *GenerateCurveKeys();
  if (security == Security::kCurve) o.curve = server ? keys.ForServer() : keys.ForClient();
  if (security == Security::kAesGcm) {
    o.sealer = *PayloadSealer::Create(CurveKeyBytes(keys.payload_key));
    o.seal_threads = seal_threads;
  }
  return std::make_unique<ZmqVan>(o);
}

Timing RoundTrip(const Args& a, int streams, Security security) {
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_cluster()->set_servers(1);
  config.mutable_cluster()->set_workers(1);
  config.mutable_checkpoint()->set_every_minutes(0);
  ParameterServerOptions so;
  so.config = config;
  so.parameter_count = a.params;
  so.job_id = 1;
  so.threads = a.threads;
  so.endpoint = "tcp://127.0.0.1:0";
  ZmqVanOptions server_van;
  server_van.io_threads = streams;
  auto server = ParameterServer::Create(so, SecuredVan(server_van, security, /*server=*/true, a.threads));
  PSF_CHECK(server.ok());
  std::thread serving([p = server->get()] { PSF_CHECK(p->Run().ok()); });
  PsClientOptions co;
  co.job_id = 1;
  co.servers = {(*server)->endpoint()};
  co.parameter_count = a.params;
  co.pieces = std::make_shared<const PieceTable>(JobPieceTable(config, a.params, {}));
  ZmqVanOptions client_van;
  client_van.streams = streams;
  client_van.io_threads = std::max(2, streams);
  auto client = PsClient::Create(co, SecuredVan(client_van, security, /*server=*/false, a.threads));
  PSF_CHECK(client.ok());
  std::vector<float> grad(a.params, 1e-3f), params(a.params);
  PSF_CHECK((*client)->Wait(*(*client)->Pull(0, params.data())).ok());
  Timing best;
  for (int t = 1; t <= a.iters; ++t) {
    const PushPullSeconds step = TimePushPull(client->get(), t, grad.data(), params.data());
    best.push = std::min(best.push, step.push);
    best.round_trip = std::min(best.round_trip, step.round_trip);
  }
  (*server)->Stop();
  serving.join();
  return best;
}

// The whole benchmark, each result printed as it is measured.
int Run(const Args& a) {
  SetLogLevel(LogLevel::kWarning);
  const double bytes = static_cast<double>(a.params) * 4;
  std::printf("parameters %llu (%.1f MB fp32 each way), 16 MiB pieces, best of %d, %u cores\n",
              static_cast<unsigned long long>(a.params), bytes / 1e6, a.iters, std::thread::hardware_concurrency());
  std::printf("%-11s %7s %12s %12s %14s\n", "transport", "streams", "push ms", "push+pull ms", "GB/s each way");
  for (Security security : {Security::kNone, Security::kCurve, Security::kAesGcm}) {
    const char* name = security == Security::kNone ? "tcp" : security == Security::kCurve ? "tcp+CURVE" : "tcp+AES-GCM";
    for (int streams : {1, 2, 4}) {
      const Timing t = RoundTrip(a, streams, security);
      std::printf("%-11s %7d %12.1f %12.1f %14.2f\n", name, streams, t.push * 1e3, t.round_trip * 1e3,
                  bytes / (t.round_trip / 2) / 1e9);
    }
  }
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) { return psformer::Run(psformer::Parse(argc, argv)); }
