// What the parameter-server benchmarks (pserver_roundtrip, streams_bench) share: their clock,
// their numeric flags, and one timed step of a worker's push and pull.
#ifndef PSFORMER_BENCH_PSERVER_BENCH_H_
#define PSFORMER_BENCH_PSERVER_BENCH_H_

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <variant>

#include "common/logging.h"
#include "pserver/client/ps_client.h"

namespace psformer {

using Clock = std::chrono::steady_clock;
inline double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A benchmark setting by the flag that sets it: {"--iters", &args.iters}.
using NumericFlag = std::pair<const char*, std::variant<int*, uint64_t*>>;

// Reads the command line's `--name N` pairs into the settings `flags` names. A name not listed is
// passed over, as is a last name without a value.
inline void ReadNumericFlags(int argc, char** argv, std::initializer_list<NumericFlag> flags) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const long long value = std::atoll(argv[i + 1]);
    for (const auto& [name, setting] : flags) {
      if (std::strcmp(argv[i], name) != 0) continue;
      std::visit([value](auto* s) { *s = static_cast<std::remove_pointer_t<decltype(s)>>(value); }, setting);
    }
  }
}

// Seconds of one step of a worker: until every shard acknowledged the push, and until the pull
// of the step's updated parameters arrived (the round trip, the servers' update included).
struct PushPullSeconds {
  double push = 0;
  double round_trip = 0;
};

// Pushes `grad` as step `step` and pulls the updated parameters into `params` in `pull_dtype`.
inline PushPullSeconds TimePushPull(PsClient* client, int64_t step, const float* grad, float* params,
                                    proto::DType pull_dtype = proto::FLOAT32) {
  const auto start = Clock::now();
  auto push = client->Push(step, grad, 1000, 0);
  auto pull = client->Pull(step, params, pull_dtype);
  PSF_CHECK(push.ok() && pull.ok());
  PSF_CHECK(client->Wait(*push).ok());
  PushPullSeconds seconds;
  seconds.push = Since(start);
  PSF_CHECK(client->Wait(*pull).ok());
  seconds.round_trip = Since(start);
  return seconds;
}

}  // namespace psformer

#endif  // PSFORMER_BENCH_PSERVER_BENCH_H_
