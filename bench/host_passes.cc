// Host memory passes at 1, 2, 4 ... threads: what one pass over host memory of each kind the data
// path makes costs on this machine, to tell a machine whose cores are the limit from one whose
// memory bandwidth is. Each pass runs over fresh buffers larger than any cache, split with
// ParallelFor as the data path splits it:
//   read+crc   Crc32cParallel (a push's CRC, lent in place)
//   copy       memcpy (a copy with no check)
//   copy+crc   Crc32cSpans with a destination (a pull's piece checked in its copy into place)
//   adam       AdamFused with the snapshot written (a server's update pass: 16 bytes read, 16
//              written an element)
//   land-rows  PullLanding::LandNow of a split piece's ROWS part: rows of 512 values, one in
//              five of the array's (as a base batch names ~7,500 of 37,000), checked, then
//              written run by run into place (the part a worker lands after backward)
//   land-dense the same for the DENSE part, the other four rows in five
//   land-whole PullLanding::LandNow of a whole piece in 1 MiB frames: copied into place, its
//              CRC-32C checked in the copy (a pull that writes params())
//   land-lent  the same piece left where it came (Job::lend): its CRC-32C checked in one read
//   grad-then-crc  a CPU worker's gradient copied off its "device" (one thread, as the launching
//              thread copies it), then its push's CRC-32C read (split over the threads): what
//              its copy and its client did before the copy recorded block CRCs
//   grad-recorded  the same copy recording each block's CRC (ImmediateRangeDownloader with
//              RecordBlockCrcs), then the push's CRC from the record (BlockCrcs::Crc32cOf): now
// and prints, per pass and thread count, the best of --reps runs in GB/s of bytes moved (read +
// written) and ns an element (4-byte elements; for land-*, an element of the part).
//
// Usage: psformer_host_passes [--mib M] [--reps R] [--max-threads T]
//   M (default 256): MiB of each array; T (default the machine's threads).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/adam.h"
#include "common/block_crcs.h"
#include "common/crc32c.h"
#include "common/parallel_for.h"
#include "pserver/client/pull_landing.h"
#include "pserver/wire/gradient_rows.h"
#include "worker/backend/range_downloader.h"

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

// A split piece's part as a server answers it: its run table (one run a named row), then its
// values in frames of at most 1 MiB, viewing `values` (which must outlive it). WHOLE: a whole
// piece, its values alone.
WireMessage PartOfPiece(size_t n, const std::vector<ElementRun>& named, proto::PushPart which,
                        const std::vector<float>& values) {
  WireMessage msg;
  msg.header.set_type(proto::PARAMS);
  msg.header.set_dtype(proto::FLOAT32);
  msg.header.set_begin(0);
  msg.header.set_end(n);
  msg.header.set_part(which);
  if (which != proto::WHOLE) {
    msg.header.set_runs(static_cast<uint32_t>(named.size()));
    msg.payload.push_back(Frame::Copy(named.data(), named.size() * kRunBytes));
  }
  const size_t frame = (1 << 20) / sizeof(float);
  for (size_t at = 0; at < values.size(); at += frame) {
    msg.payload.push_back(
        Frame::View(values.data() + at, std::min(frame, values.size() - at) * sizeof(float), nullptr));
  }
  uint32_t crc = 0;
  for (const Frame& f : msg.payload) crc = Crc32c(crc, f.data(), f.size());
  msg.header.set_payload_crc32c(crc);
  return msg;
}

// A "device" whose memory is the host's, as the CPU backend's.
class HostMemory final : public DeviceMemory {
 public:
  void* AllocateBytes(size_t bytes) override { return std::calloc(bytes, 1); }
  void FreeBytes(void* p) override { std::free(p); }
  void CopyToDevice(void* d, const void* h, size_t bytes) override { std::memcpy(d, h, bytes); }
  void CopyToHost(void* h, const void* d, size_t bytes) override { std::memcpy(h, d, bytes); }
  void Synchronize() override {}
};

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
  std::printf("%-13s %7s %9s %8s\n", "pass", "threads", "GB/s", "ns/elem");
  std::vector<int> counts;
  for (int t = 1; t < o.max_threads; t *= 2) counts.push_back(t);
  counts.push_back(o.max_threads);
  const auto row = [&](const char* name, int threads, double seconds, double bytes_moved) {
    std::printf("%-13s %7d %9.1f %8.3f\n", name, threads, bytes_moved / seconds / 1e9, seconds / n * 1e9);
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
  // A whole piece pulled: copied into the parameters with its CRC-32C checked in the copy
  // (land-whole), or checked where it lies and left there for its upload (land-lent).
  {
    const WireMessage whole = PartOfPiece(n, {}, proto::WHOLE, a);
    for (const bool lend : {false, true}) {
      for (int t : counts) {
        bool intact = true;
        const double s = Best(o.reps, [&] {
          const PullLanding::Landed l = PullLanding::LandNow({0, 0, 0, whole, out.data(), nullptr, false, lend}, t);
          intact = intact && l.intact && (l.lent != nullptr) == lend;
        });
        if (!intact) {
          std::fprintf(stderr, "psformer_host_passes: a whole piece did not land intact\n");
          return 1;
        }
        row(lend ? "land-lent" : "land-whole", t, s, (lend ? 1.0 : 2.0) * bytes);
      }
    }
  }
  // A CPU worker's gradient leaving: copied by the launching thread in pieces of 4M values, then
  // checksummed for its push, before (a read) and now (from the blocks the copy recorded).
  {
    HostMemory memory;
    constexpr size_t kPiece = size_t{4} << 20;
    for (const bool record : {false, true}) {
      ImmediateRangeDownloader<float> copies(&memory, a.data(), out.data(), n);
      const BlockCrcs* crcs = record ? copies.RecordBlockCrcs() : nullptr;
      for (int t : counts) {
        const double s = Best(o.reps, [&] {
          for (size_t at = 0; at < n; at += kPiece) {
            const size_t e = std::min(n, at + kPiece);
            copies.Start(at, e);
            copies.WaitOldest();
            const size_t piece_bytes = (e - at) * sizeof(float);
            sink += record ? *crcs->Crc32cOf(out.data() + at, piece_bytes)
                           : Crc32cParallel(out.data() + at, piece_bytes, t);
          }
        });
        row(record ? "grad-recorded" : "grad-then-crc", t, s, (record ? 2.0 : 3.0) * bytes);
      }
    }
  }
  constexpr uint32_t kRow = 512;  // d_model values: one embedding row
  std::vector<ElementRun> named;
  const uint64_t tabled = std::min<uint64_t>(n, UINT32_MAX);  // a run table's offsets are 32-bit
  for (uint64_t at = 0; at + kRow <= tabled; at += 5 * kRow) named.push_back({static_cast<uint32_t>(at), kRow});
  for (const proto::PushPart which : {proto::ROWS, proto::DENSE}) {
    const std::vector<ElementRun> runs = which == proto::ROWS ? named : ComplementRuns(named, n);
    size_t count = 0;
    for (const ElementRun& r : runs) count += r.length;
    const std::vector<float> values(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(count));
    const WireMessage part = PartOfPiece(n, named, which, values);
    for (int t : counts) {
      bool intact = true;
      const double s = Best(o.reps, [&] {
        intact = intact && PullLanding::LandNow({0, 0, 0, part, out.data(), nullptr, false}, t).intact;
      });
      if (!intact) {
        std::fprintf(stderr, "psformer_host_passes: a part did not land intact\n");
        return 1;
      }
      // Its values read twice (the check, the copy) and written once; per element of the part.
      std::printf("%-13s %7d %9.1f %8.3f\n", which == proto::ROWS ? "land-rows" : "land-dense", t,
                  3.0 * count * sizeof(float) / s / 1e9, s / count * 1e9);
    }
  }
  std::printf("(crc sum %llx)\n", static_cast<unsigned long long>(sink));
  return 0;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) { return psformer::Main(argc, argv); }
