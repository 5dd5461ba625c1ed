// Benchmark: one worker's push + pull round trip of a base-sized parameter vector through 1..4
// parameter servers on loopback (BSP, one Adam update per step), next to a memcpy of the same
// bytes; and the server's Adam update in GB/s next to a STREAM-like copy. Transports side by
// side: TCP without and with CURVE, ipc://, and the same-host path (ipc:// headers, payloads
// through shared memory, common/transport/shm_van.h). Besides the round trip (which includes
// the server's Adam update), the push alone and a repeated pull of the updated step measure
// the transport itself. "shm, threaded" splits each side's copies over --threads threads.
//   build/bench/pserver_roundtrip [--params N] [--servers-max S] [--iters K] [--frame-bytes B] [--threads T]
// Results and the machine go to bench/RESULTS.md ("Parameter server").
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "bench/pserver_bench.h"
#include "common/adam.h"
#include "common/config_loader.h"
#include "common/crc32c.h"
#include "common/enum_name.h"
#include "common/logging.h"
#include "common/transport/curve_keys.h"
#include "common/transport/shm_van.h"
#include "common/transport/zmq_van.h"
#include "pserver/client/ps_client.h"
#include "pserver/server/parameter_server.h"

namespace psformer {
namespace {

struct Args {
  uint64_t params = 63'000'000;
  int servers_max = 4;
  int iters = 5;
  int frame_bytes = 1 << 20;
  int threads = 2;
};

Args Parse(int argc, char** argv) {
  Args a;
  ReadNumericFlags(argc, argv,
                   {{"--params", &a.params},
                    {"--servers-max", &a.servers_max},
                    {"--iters", &a.iters},
                    {"--frame-bytes", &a.frame_bytes},
                    {"--threads", &a.threads}});
  return a;
}

struct Timing {
  double round_trip = 1e30;  // push + pull, best of iters.
  double push = 0;           // of that best: until every shard acknowledged the push.
  double repull = 1e30;      // best pull of a step already updated: transport and CRC only.
  double best_push = 1e30;   // best push alone.
  double client_cpu = 1e30;  // best CPU time of the client's thread in a push + pull.
};

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// kShmCrcApart: the same-host path with the push's CRC-32C computed in a pass of its own before
// the copy, as before the copy computed it (ShmVanOptions::checksum_in_copy = false).
// kShmThreaded: the same-host path with each side's copies and checksums split over --threads
// threads (ShmVanOptions::copy_threads, PsClientOptions::copy_threads); the others use one.
// kShmLent: the same-host path with the gradient in PsClient::AllocatePushMemory, as a worker's
// data path places it: the push is lent to the servers in place (its CRC-32C one read), not copied.
enum class Transport { kTcp, kTcpCurve, kIpc, kShm, kShmCrcApart, kShmThreaded, kShmLent };
bool SharedMemory(Transport t) {
  return t == Transport::kShm || t == Transport::kShmCrcApart || t == Transport::kShmThreaded ||
         t == Transport::kShmLent;
}
const char* TransportName(Transport t) {
  static constexpr const char* kNames[] = {"tcp",           "tcp+CURVE",     "ipc",       "shm",
                                           "shm, CRC apart", "shm, threaded", "shm, lent"};
  static_assert(std::size(kNames) == static_cast<size_t>(Transport::kShmLent) + 1, "a name for every transport");
  return EnumName(t, kNames, "?");
}

// A Van for `t`: `o` holds one side's own settings and `side_keys` its CURVE keys (used only for
// kTcpCurve); kShm and kShmCrcApart put a ShmVan in front.
std::unique_ptr<Van> TransportVan(Transport t, ZmqVanOptions o, const CurveKeys& side_keys, int copy_threads) {
  if (t == Transport::kTcpCurve) o.curve = side_keys;
  auto van = std::make_unique<ZmqVan>(o);
  if (!SharedMemory(t)) return van;
  ShmVanOptions so;
  so.job_id = 1;
  so.checksum_in_copy = t != Transport::kShmCrcApart;
  so.copy_threads = copy_threads;
  return std::make_unique<ShmVan>(std::move(van), so);
}

// The server's and the client's Van.
std::unique_ptr<Van> ServerVan(Transport t, const CurveKeys& keys, int copy_threads) {
  return TransportVan(t, {}, keys.ForServer(), copy_threads);
}

std::unique_ptr<Van> ClientVan(Transport t, const CurveKeys& keys, int copy_threads) {
  ZmqVanOptions o;
  o.io_threads = 2;
  return TransportVan(t, o, keys.ForClient(), copy_threads);
}

// Best-of-iters time of one push + pull of the whole vector with `servers` shards. The push is
// acknowledged on receipt; the pull waits for the update, so it carries the Adam time. bf16:
// gradients and parameters travel as bf16 (cluster.gradient_dtype and param_dtype BF16).
Timing RoundTrip(const Args& a, int servers, Transport transport, bool bf16) {
  static const CurveKeys keys = *GenerateCurveKeys();
  const int copy_threads = transport == Transport::kShmThreaded ? a.threads : 1;
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_cluster()->set_servers(servers);
  config.mutable_cluster()->set_workers(1);
  config.mutable_cluster()->set_frame_bytes(a.frame_bytes);
  config.mutable_checkpoint()->set_every_minutes(0);
  std::vector<std::unique_ptr<ParameterServer>> group;
  std::vector<std::string> endpoints;
  for (int k = 0; k < servers; ++k) {
    ParameterServerOptions o;
    o.config = config;
    o.shard = k;
    o.parameter_count = a.params;
    o.job_id = 1;
    o.threads = a.threads;
    const bool tcp = transport == Transport::kTcp || transport == Transport::kTcpCurve;
    o.endpoint = tcp ? "tcp://127.0.0.1:0" : "ipc:///tmp/psformer-bench-" + std::to_string(k);
    auto s = ParameterServer::Create(o, ServerVan(transport, keys, copy_threads));
    PSF_CHECK(s.ok());
    endpoints.push_back(s.value()->endpoint());
    group.push_back(std::move(s).value());
  }
  std::vector<std::thread> threads;
  for (auto& s : group) threads.emplace_back([p = s.get()] { PSF_CHECK(p->Run().ok()); });
  PsClientOptions co;
  co.job_id = 1;
  co.servers = endpoints;
  co.parameter_count = a.params;
  co.frame_bytes = static_cast<size_t>(a.frame_bytes);
  co.io_threads = 2;
  co.copy_threads = copy_threads;
  co.gradient_dtype = bf16 ? proto::BFLOAT16 : proto::FLOAT32;
  auto client = PsClient::Create(co, ClientVan(transport, keys, copy_threads));
  PSF_CHECK(client.ok());
  std::vector<float> heap_grad, params(a.params);
  std::shared_ptr<void> lent_grad;
  float* grad = nullptr;
  if (transport == Transport::kShmLent) {
    lent_grad = (*client)->AllocatePushMemory(a.params * sizeof(float));
    grad = static_cast<float*>(lent_grad.get());
    std::fill(grad, grad + a.params, 1e-3f);
  } else {
    heap_grad.assign(a.params, 1e-3f);
    grad = heap_grad.data();
  }
  PSF_CHECK((*client)->Wait(*(*client)->Pull(0, params.data())).ok());
  Timing best;
  const proto::DType dtype = bf16 ? proto::BFLOAT16 : proto::FLOAT32;
  for (int t = 1; t <= a.iters; ++t) {
    const double cpu_start = ThreadCpuSeconds();
    const auto start = Clock::now();
    PSF_CHECK((*client)->AwaitLentPushes().ok());  // the last push's memory back (lent only; at once here)
    const double given_back = Since(start);
    PushPullSeconds step = TimePushPull(client->get(), t, grad, params.data(), dtype);
    step.push += given_back;
    step.round_trip += given_back;
    best.client_cpu = std::min(best.client_cpu, ThreadCpuSeconds() - cpu_start);
    if (step.round_trip < best.round_trip) {
      best.round_trip = step.round_trip;
      best.push = step.push;
    }
    best.best_push = std::min(best.best_push, step.push);
    const auto again = Clock::now();
    auto repull = (*client)->Pull(t, params.data(), dtype);
    PSF_CHECK(repull.ok() && (*client)->Wait(*repull).ok());
    best.repull = std::min(best.repull, Since(again));
  }
  for (auto& s : group) s->Stop();
  for (auto& t : threads) t.join();
  return best;
}

double BestOf(int iters, const std::function<void()>& f) {
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    f();
    best = std::min(best, Since(start));
  }
  return best;
}

// The whole benchmark, each result printed as it is measured.
int Run(const Args& a) {
  SetLogLevel(LogLevel::kWarning);
  const double bytes = static_cast<double>(a.params) * 4;
  std::printf("parameters %llu (%.1f MB fp32), frame %d bytes, update threads %d, best of %d\n",
              static_cast<unsigned long long>(a.params), bytes / 1e6, a.frame_bytes, a.threads, a.iters);

  std::vector<float> src(a.params, 1.0f), dst(a.params, 0.0f);
  const double copy_s = BestOf(a.iters, [&] { std::memcpy(dst.data(), src.data(), a.params * 4); });
  std::printf("memcpy of the vector:            %8.1f ms  %6.2f GB/s  (push+pull moves it twice: %.1f ms)\n",
              copy_s * 1e3, bytes / copy_s / 1e9, 2 * copy_s * 1e3);

  uint32_t crc = 0;
  const double crc_s = BestOf(a.iters, [&] { crc = Crc32c(crc, src.data(), a.params * 4); });
  std::printf("CRC-32C of the vector:           %8.1f ms  %6.2f GB/s\n", crc_s * 1e3, bytes / crc_s / 1e9);
  // What a sender pays to checksum a payload and copy it into shared memory: two passes, or one
  // (CopyWithCrc32c). The yardstick is the memcpy above.
  const double two_pass_s = BestOf(a.iters, [&] {
    crc = Crc32c(crc, src.data(), a.params * 4);
    std::memcpy(dst.data(), src.data(), a.params * 4);
  });
  const double fused_s = BestOf(a.iters, [&] { crc = CopyWithCrc32c(dst.data(), src.data(), a.params * 4, crc); });
  std::printf("CRC-32C, then memcpy (2 passes): %8.1f ms  %6.2f GB/s  %3.0f %% of memcpy\n", two_pass_s * 1e3,
              bytes / two_pass_s / 1e9, 100.0 * copy_s / two_pass_s);
  std::printf("copy with CRC-32C (1 pass):      %8.1f ms  %6.2f GB/s  %3.0f %% of memcpy\n", fused_s * 1e3,
              bytes / fused_s / 1e9, 100.0 * copy_s / fused_s);

  std::vector<float> p(a.params, 0.1f), m(a.params, 0.0f), v(a.params, 0.0f), g(a.params, 1e-3f);
  AdamHyper hyper;
  int64_t step = 0;
  for (int threads : {1, a.threads}) {
    const double adam_s = BestOf(a.iters, [&] {
      AdamUpdateParallel(hyper, ++step, 1e-3, a.params, g.data(), p.data(), m.data(), v.data(), threads);
    });
    // Adam reads g, p, m, v and writes p, m, v: 28 bytes per element.
    std::printf("Adam update, %d thread(s):        %8.1f ms  %6.2f GB/s of memory traffic\n", threads, adam_s * 1e3,
                28.0 * a.params / adam_s / 1e9);
  }
  // STREAM "copy" a[i] = b[i] (8 bytes per element), same threads, for the bandwidth ceiling.
  const double stream_s = BestOf(a.iters, [&] {
    std::vector<std::thread> pool;
    const uint64_t chunk = (a.params + a.threads - 1) / a.threads;
    for (int k = 0; k < a.threads; ++k) {
      pool.emplace_back([&, k] {
        const uint64_t b = k * chunk, e = std::min<uint64_t>(a.params, b + chunk);
        float* __restrict d = dst.data();
        const float* __restrict s = src.data();
        for (uint64_t i = b; i < e; ++i) d[i] = s[i];
      });
    }
    for (auto& t : pool) t.join();
  });
  std::printf("STREAM-like copy, %d thread(s):   %8.1f ms  %6.2f GB/s\n", a.threads, stream_s * 1e3,
              8.0 * a.params / stream_s / 1e9);

  for (Transport transport : {Transport::kTcp, Transport::kTcpCurve, Transport::kIpc, Transport::kShm,
                              Transport::kShmCrcApart, Transport::kShmThreaded, Transport::kShmLent}) {
    for (int servers = 1; servers <= a.servers_max; ++servers) {
      const Timing rt = RoundTrip(a, servers, transport, false);
      const double moved = rt.best_push + rt.repull;
      std::printf(
          "push+pull over %-14s %d server(s): %8.1f ms  %6.2f GB/s (2 x vector / time); push acked after %.1f ms\n"
          "    transport alone: push %.1f ms + pull of the updated step %.1f ms = %.1f ms, %.2f GB/s, "
          "%.0f %% of memcpy; client thread's CPU %.1f ms a push + pull\n",
          TransportName(transport), servers, rt.round_trip * 1e3, 2 * bytes / rt.round_trip / 1e9, rt.push * 1e3,
          rt.best_push * 1e3, rt.repull * 1e3, moved * 1e3, 2 * bytes / moved / 1e9,
          100.0 * (2 * bytes / moved) / (bytes / copy_s), rt.client_cpu * 1e3);
    }
  }
  // Both ways in bf16: half the bytes on the wire, plus a conversion at each end.
  for (int servers = 1; servers <= a.servers_max; ++servers) {
    const Timing rt = RoundTrip(a, servers, Transport::kTcp, true);
    std::printf("push+pull over tcp in bf16, %d server(s):  %8.1f ms; push acked after %.1f ms\n", servers,
                rt.round_trip * 1e3, rt.push * 1e3);
  }
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) { return psformer::Run(psformer::Parse(argc, argv)); }
