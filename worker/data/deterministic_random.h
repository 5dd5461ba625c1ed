// Random numbers whose every output is fixed by the seed on any compiler and standard library.
// std::shuffle, std::uniform_int_distribution and friends leave their algorithms unspecified,
// so a batch order built on them could differ between two machines of one job; the data
// pipeline uses only what is here (docs/determinism.md).
#ifndef PSFORMER_WORKER_DATA_DETERMINISTIC_RANDOM_H_
#define PSFORMER_WORKER_DATA_DETERMINISTIC_RANDOM_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace psformer {

// SplitMix64 (Steele, Lea and Flood, 2014): tiny state, good statistical quality for
// shuffling and synthetic data, and trivially reproducible.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n). REQUIRES: n > 0. Lemire's multiply-shift with rejection, so that no
  // value is favoured (plain `Next() % n` is biased).
  uint64_t Below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t state_;
};

// A well-mixed 64-bit value of (a, b): derives independent streams from one seed, e.g.
// MixSeed(seed, epoch) seeds the shuffle of that epoch.
inline uint64_t MixSeed(uint64_t a, uint64_t b) {
  SplitMix64 first(a);
  SplitMix64 second(first.Next() ^ b);
  return second.Next();
}

// Fisher-Yates shuffle driven by `random`.
template <typename T>
void DeterministicShuffle(std::vector<T>* values, SplitMix64* random) {
  for (size_t i = values->size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(random->Below(i));
    std::swap((*values)[i - 1], (*values)[j]);
  }
}

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_DETERMINISTIC_RANDOM_H_
