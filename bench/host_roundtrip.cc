// Benchmark: one worker's push + pull of a base-sized gradient through one parameter server on
// another host, as a fraction of the link's line rate. Run one side per host (bench/cluster_bench.sh
// does, on hosts of scripts/cluster-sim):
//   host_roundtrip --serve tcp://0.0.0.0:PORT [--params N] [--threads T]   (until SIGTERM / SIGINT)
//   host_roundtrip --connect tcp://HOST:PORT [--params N] [--iters K] [--bf16] [--line-gbit G]
// The client prints the best push + pull and the bytes it moved (both ways) over the line rate
// in both directions for that time. No CURVE: this measures the wire, README (Security) the cost
// of encryption. Results go to bench/RESULTS.md ("Across hosts").
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/config_loader.h"
#include "common/logging.h"
#include "common/transport/zmq_van.h"
#include "pserver/client/ps_client.h"
#include "pserver/server/parameter_server.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};  // NOLINT: set by the signal handler.
void OnStop(int) { g_stop.store(true); }

struct Args {
  std::string serve, connect;
  uint64_t params = 63'000'000;
  int iters = 4;
  int threads = 2;
  bool bf16 = false;
  double line_gbit = 10;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--bf16")
      a.bf16 = true;
    else if (k == "--serve")
      a.serve = argv[++i];
    else if (k == "--connect")
      a.connect = argv[++i];
    else if (k == "--params")
      a.params = std::strtoull(argv[++i], nullptr, 10);
    else if (k == "--iters")
      a.iters = std::atoi(argv[++i]);
    else if (k == "--threads")
      a.threads = std::atoi(argv[++i]);
    else if (k == "--line-gbit")
      a.line_gbit = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "host_roundtrip: unknown argument %s %s\n", k.c_str(), v);
      std::exit(2);
    }
  }
  if (a.serve.empty() == a.connect.empty()) {
    std::fprintf(stderr, "host_roundtrip: give --serve ENDPOINT or --connect ENDPOINT\n");
    std::exit(2);
  }
  return a;
}

proto::JobConfig Config() {
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_cluster()->set_servers(1);
  config.mutable_cluster()->set_workers(1);
  config.mutable_checkpoint()->set_every_minutes(0);
  return config;
}

int Serve(const Args& a) {
  ParameterServerOptions o;
  o.config = Config();
  o.parameter_count = a.params;
  o.job_id = 1;
  o.threads = a.threads;
  o.endpoint = a.serve;
  auto server = ParameterServer::Create(o, std::make_unique<ZmqVan>());
  if (!server.ok()) {
    std::fprintf(stderr, "host_roundtrip: %s\n", server.status().message().c_str());
    return 1;
  }
  signal(SIGTERM, OnStop);
  signal(SIGINT, OnStop);
  std::thread stopper([&] {
    while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*server)->Stop();
  });
  std::printf("serving %llu parameters at %s\n", static_cast<unsigned long long>(a.params), a.serve.c_str());
  std::fflush(stdout);
  const Status run = (*server)->Run();
  g_stop.store(true);
  stopper.join();
  return run.ok() ? 0 : 1;
}

int Connect(const Args& a) {
  PsClientOptions co;
  co.job_id = 1;
  co.servers = {a.connect};
  co.parameter_count = a.params;
  co.gradient_dtype = a.bf16 ? proto::BFLOAT16 : proto::FLOAT32;
  auto client = PsClient::Create(co);
  if (!client.ok()) {
    std::fprintf(stderr, "host_roundtrip: %s\n", client.status().message().c_str());
    return 1;
  }
  std::vector<float> grad(a.params, 1e-3f), params(a.params);
  if (!(*client)->Wait(*(*client)->Pull(0, params.data())).ok()) return 1;
  double best = 1e30, best_push = 0;
  for (int t = 1; t <= a.iters; ++t) {
    const auto start = Clock::now();
    auto push = (*client)->Push(t, grad.data(), 1000, 0);
    auto pull = (*client)->Pull(t, params.data(), a.bf16 ? proto::BFLOAT16 : proto::FLOAT32);
    if (!push.ok() || !pull.ok() || !(*client)->Wait(*push).ok()) return 1;
    const double pushed = std::chrono::duration<double>(Clock::now() - start).count();
    if (!(*client)->Wait(*pull).ok()) return 1;
    const double total = std::chrono::duration<double>(Clock::now() - start).count();
    if (total < best) best = total, best_push = pushed;
  }
  // Push and pull use opposite directions of the full-duplex link, but the pull waits for the
  // push (BSP: it returns the updated parameters), so the ideal is both transfers back to back.
  const double bytes_each_way = static_cast<double>(a.params) * (a.bf16 ? 2 : 4);
  const double ideal = 2 * bytes_each_way * 8 / (a.line_gbit * 1e9);
  std::printf(
      "%s push+pull of %llu parameters: best %.1f ms (push acked after %.1f ms); line rate %.1f Gbit/s "
      "would take %.1f ms: %.0f%% of line rate\n",
      a.bf16 ? "bf16" : "fp32", static_cast<unsigned long long>(a.params), best * 1e3, best_push * 1e3, a.line_gbit,
      ideal * 1e3, 100 * ideal / best);
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) {
  psformer::SetLogLevel(psformer::LogLevel::kWarning);
  const psformer::Args a = psformer::Parse(argc, argv);
  return a.serve.empty() ? psformer::Connect(a) : psformer::Serve(a);
}
