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

#include "common/config_loader.h"
#include "common/logging.h"
#include "common/transport/curve_keys.h"
#include "common/transport/zmq_van.h"
#include "pserver/client/ps_client.h"
#include "pserver/server/parameter_server.h"
#include "pserver/wire/piece_table.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Args {
  uint64_t params = 63'000'000;
  int iters = 4;
  int threads = 2;  // the server's update threads
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (k == "--params") a.params = static_cast<uint64_t>(v);
    if (k == "--iters") a.iters = static_cast<int>(v);
    if (k == "--threads") a.threads = static_cast<int>(v);
  }
  return a;
}

struct Timing {
  double round_trip = 1e30;  // best push + pull
  double push = 1e30;        // best push alone (until every piece is acknowledged)
};

enum class Security { kNone, kCurve, kAesGcm };

Timing RoundTrip(const Args& a, int streams, Security security) {
  const bool curve = security == Security::kCurve;
  static const CurveKeys keys = *GenerateCurveKeys();
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
  if (curve) server_van.curve = keys.ForServer();
  if (security == Security::kAesGcm) {
    server_van.sealer = *PayloadSealer::Create(CurveKeyBytes(keys.payload_key));
    server_van.seal_threads = a.threads;
  }
  auto server = ParameterServer::Create(so, std::make_unique<ZmqVan>(server_van));
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
  if (curve) client_van.curve = keys.ForClient();
  if (security == Security::kAesGcm) {
    client_van.sealer = *PayloadSealer::Create(CurveKeyBytes(keys.payload_key));
    client_van.seal_threads = a.threads;
  }
  auto client = PsClient::Create(co, std::make_unique<ZmqVan>(client_van));
  PSF_CHECK(client.ok());
  std::vector<float> grad(a.params, 1e-3f), params(a.params);
  PSF_CHECK((*client)->Wait(*(*client)->Pull(0, params.data())).ok());
  Timing best;
  for (int t = 1; t <= a.iters; ++t) {
    const auto start = Clock::now();
    auto push = (*client)->Push(t, grad.data(), 1000, 0);
    auto pull = (*client)->Pull(t, params.data());
    PSF_CHECK(push.ok() && pull.ok());
    PSF_CHECK((*client)->Wait(*push).ok());
    best.push = std::min(best.push, Since(start));
    PSF_CHECK((*client)->Wait(*pull).ok());
    best.round_trip = std::min(best.round_trip, Since(start));
  }
  (*server)->Stop();
  serving.join();
  return best;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) {
  using namespace psformer;
  SetLogLevel(LogLevel::kWarning);
  const Args a = Parse(argc, argv);
  const double bytes = static_cast<double>(a.params) * 4;
  std::printf("parameters %llu (%.1f MB fp32 each way), 16 MiB pieces, best of %d, %u cores\n",
              static_cast<unsigned long long>(a.params), bytes / 1e6, a.iters, std::thread::hardware_concurrency());
  std::printf("%-11s %7s %12s %12s %14s\n", "transport", "streams", "push ms", "push+pull ms", "GB/s each way");
  for (Security security : {Security::kNone, Security::kCurve, Security::kAesGcm}) {
    const char* name = security == Security::kNone ? "tcp" : security == Security::kCurve ? "tcp+CURVE" : "tcp+AES-GCM";
    for (int streams : {1, 2, 4}) {
      const Timing t = RoundTrip(a, streams, security);
      std::printf("%-11s %7d %12.1f %12.1f %14.2f\n", name, streams, t.push * 1e3,
                  t.round_trip * 1e3, bytes / (t.round_trip / 2) / 1e9);
    }
  }
  return 0;
}
