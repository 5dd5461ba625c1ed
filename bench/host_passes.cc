// Host memory passes at 1, 2, 4 ... threads: what one pass over host memory of each kind the data
// path makes costs on this machine, to tell a machine whose cores are the limit from one whose
// memory bandwidth is. Each pass runs over fresh buffers larger than any cache, split with
// ParallelFor as the data path splits it:
//   read+crc   Crc32cParallel (a push's CRC, lent in place)
//   copy       memcpy (a copy with no check)
//   copy+crc   Crc32cSpans with a destination (a pull's piece checked in its copy into place)
//   adam       AdamFused with the snapshot written (a server's update pass: 16 bytes read, 16
//              written an element)
// and prints, per pass and thread count, the best of --reps runs in GB/s of bytes moved (read +
// written) and ns an element (4-byte elements).
//
// Usage: psformer_host_passes [--mib M] [--reps R] [--max-threads T]
//   M (default 256): MiB of each array; T (default the machine's threads).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/adam.h"
#include "common/crc32c.h"
#include "common/parallel_for.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  size_t mib = 256;
  int reps = 5;
  int max_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
};

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "psformer_host_passes: %s wants a value\n", flag.c_str());
      return false;
    }
    char* end = nullptr;
    const long v = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || v < 1 || v > 65536) {
      std::fprintf(stderr, "psformer_host_passes: %s wants a number from 1 to 65536, got '%s'\n", flag.c_str(),
                   argv[i]);
      return false;
    }
    if (flag == "--mib") {
      o->mib = static_cast<size_t>(v);
    } else if (flag == "--reps") {
      o->reps = static_cast<int>(v);
    } else if (flag == "--max-threads") {
      o->max_threads = static_cast<int>(v);
    } else {
      std::fprintf(stderr, "psformer_host_passes: unknown flag %s (see the header of host_passes.cc)\n", flag.c_str());
      return false;
    }
  }
  return true;
}

// The best time of `reps` runs of `pass`, in seconds.
double Best(int reps, const std::function<void()>& pass) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    pass();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) return 2;
  const size_t n = o.mib * (1 << 20) / sizeof(float);
  const size_t bytes = n * sizeof(float);
  // Written once before timing, so that no page is first touched inside a timed pass.
  std::vector<float> a(n, 0.5f), b(n, 0.25f), m(n, 0.0f), v(n, 0.0f), out(n, 0.0f);
  const AdamStepConstants k = AdamConstants(AdamHyper{}, 1000, 1e-4);
  uint64_t sink = 0;  // keeps the CRCs live
  std::printf("host passes over %zu MiB arrays, best of %d; GB/s counts bytes read + written\n", o.mib, o.reps);
  std::printf("%-9s %7s %9s %8s\n", "pass", "threads", "GB/s", "ns/elem");
  std::vector<int> counts;
  for (int t = 1; t < o.max_threads; t *= 2) counts.push_back(t);
  counts.push_back(o.max_threads);
  const auto row = [&](const char* name, int threads, double seconds, double bytes_moved) {
    std::printf("%-9s %7d %9.1f %8.3f\n", name, threads, bytes_moved / seconds / 1e9, seconds / n * 1e9);
  };
  for (int t : counts) {
    row("read+crc", t, Best(o.reps, [&] { sink += Crc32cParallel(a.data(), bytes, t); }), bytes);
  }
  for (int t : counts) {
    const double s = Best(o.reps, [&] {
      ParallelFor(t, n, 1 << 14, [&](int, size_t begin, size_t end) {
        std::memcpy(out.data() + begin, a.data() + begin, (end - begin) * sizeof(float));
      });
    });
    row("copy", t, s, 2.0 * bytes);
  }
  for (int t : counts) {
    row("copy+crc", t,
        Best(o.reps,
             [&] {
               sink += Crc32cSpans({CrcSpan{a.data(), out.data(), bytes}}, t);
             }),
        2.0 * bytes);
  }
  for (int t : counts) {
    const double s = Best(o.reps, [&] {
      ParallelFor(t, n, 1 << 14, [&](int, size_t begin, size_t end) {
        AdamFused(k, end - begin, b.data() + begin, 16000.0f, a.data() + begin, m.data() + begin, v.data() + begin,
                  out.data() + begin);
      });
    });
    row("adam", t, s, 8.0 * bytes);
  }
  std::printf("(crc sum %llx)\n", static_cast<unsigned long long>(sink));
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) { return psformer::Main(argc, argv); }
