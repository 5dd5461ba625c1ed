// Benchmark: how long work handed to a worker's client thread (worker/datapath/client_thread.h)
// waits before that thread takes it up, while the thread waits for the servers' replies, as it
// does through a step (a pull sent early is in flight). Two hand-offs, each timed `--iters` times
// at a random phase of the thread's wait (a pause of 0-2 ms before each):
//   call  a Call of an empty command from this thread, round trip (the launching thread's pull,
//         hand-over and finish commands; it waits for each)
//   post  from Post to the command's start (a gradient piece handed on by kDeviceToHost)
// One in-process server on loopback, 2 workers of which only this one pushes, so its pull of the
// step is held. Prints percentiles in microseconds. Uses only ClientThread's and PsClient's
// public API, so the same source builds against an earlier tree for a side-by-side run.
//   build/bench/client_handoff_bench [--iters N] [--seed S]
// Results and the machine go to bench/RESULTS.md ("The client thread wakes for its work").
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "bench/pserver_bench.h"
#include "common/config_loader.h"
#include "common/transport/zmq_van.h"
#include "pserver/client/ps_client.h"
#include "pserver/server/parameter_server.h"
#include "worker/datapath/client_thread.h"

namespace psformer {
namespace {

constexpr uint64_t kParams = 100000;

struct Args {
  int iters = 2000;
  int seed = 1;
};

void Print(const char* what, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  double sum = 0;
  for (double u : us) sum += u;
  std::printf("%-5s n=%zu mean=%.1f p50=%.1f p90=%.1f p99=%.1f max=%.1f (us)\n", what, us.size(),
              sum / static_cast<double>(us.size()), at(0.5), at(0.9), at(0.99), us.back());
}

int Run(const Args& a) {
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_cluster()->set_servers(1);
  config.mutable_cluster()->set_workers(2);
  config.mutable_checkpoint()->set_every_minutes(0);
  ParameterServerOptions o;
  o.config = config;
  o.shard = 0;
  o.parameter_count = kParams;
  o.job_id = 1;
  o.threads = 1;
  o.endpoint = "tcp://127.0.0.1:0";
  auto server = ParameterServer::Create(o, std::make_unique<ZmqVan>());
  PSF_CHECK(server.ok());
  std::thread serving([p = server->get()] { PSF_CHECK(p->Run().ok()); });

  PsClientOptions co;
  co.job_id = 1;
  co.servers = {(*server)->endpoint()};
  co.parameter_count = kParams;
  co.id = 0;
  auto client = PsClient::Create(co, std::make_unique<ZmqVan>());
  PSF_CHECK(client.ok());
  std::vector<float> params(kParams), grad(kParams, 1e-3f);
  std::vector<double> call_us, post_us;
  {
    ClientThread thread(std::move(client).value());
    PSF_CHECK(thread
                  .Call([&](PsClient& c) -> Status {
                    PSF_ASSIGN_OR_RETURN(auto pull, c.Pull(0, params.data()));
                    PSF_RETURN_IF_ERROR(c.Wait(pull));
                    PSF_ASSIGN_OR_RETURN(auto push, c.Push(1, grad.data(), 10, 1.0));
                    PSF_RETURN_IF_ERROR(c.Wait(push));
                    // Held: worker 1 never pushes step 1. The thread waits for its reply from now on.
                    return c.Pull(1, params.data()).status();
                  })
                  .ok());
    std::mt19937 random(static_cast<uint32_t>(a.seed));
    std::uniform_int_distribution<int> pause_us(0, 2000);
    for (int i = 0; i < a.iters; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us(random)));
      const auto start = Clock::now();
      thread.Call([](PsClient& c) { return c.has_requests(); });
      call_us.push_back(Since(start) * 1e6);
    }
    for (int i = 0; i < a.iters; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us(random)));
      std::atomic<double> ran_after{-1};
      const auto posted = Clock::now();
      thread.Post([&](PsClient&) { ran_after = Since(posted) * 1e6; });
      while (ran_after.load() < 0) std::this_thread::yield();
      post_us.push_back(ran_after.load());
    }
  }
  (*server)->Stop();
  serving.join();
  Print("call", call_us);
  Print("post", post_us);
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) {
  psformer::Args a;
  psformer::ReadNumericFlags(argc, argv, {{"--iters", &a.iters}, {"--seed", &a.seed}});
  if (a.iters < 1) {
    std::fprintf(stderr, "client_handoff_bench: --iters must be at least 1\n");
    return 2;
  }
  return psformer::Run(a);
}
