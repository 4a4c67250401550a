// Small, fast, seedable random number generators for the workloads.
//
// The workloads need a cheap generator per thread whose seed differs per
// thread *and* per run (ebizzy 0.3 famously seeded every thread with the same
// state and so always picked chunk 0; we do not repeat that).  xoshiro256**
// seeded through splitmix64 is small, fast and statistically fine for picking
// chunks, slots and sizes.
#pragma once

#include <cmath>
#include <cstdint>

namespace lazybench {

__extension__ typedef unsigned __int128 uint128_t;

// One step of splitmix64: a good 64-bit mixer, used to expand seeds.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit constexpr Rng(std::uint64_t seed) noexcept {
    std::uint64_t sm = seed;
    for (auto& word : s_) word = splitmix64(sm);
  }

  // Seed for stream `stream` (e.g. a thread index) of a run seeded `run_seed`.
  static constexpr std::uint64_t derive(std::uint64_t run_seed, std::uint64_t stream) noexcept {
    std::uint64_t sm = run_seed ^ (0xD1B54A32D192ED03ull * (stream + 1));
    return splitmix64(sm);
  }

  constexpr std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n) (n > 0), by Lemire's multiply-shift (bias < 2^-64 * n).
  constexpr std::uint64_t below(std::uint64_t n) noexcept {
    return static_cast<std::uint64_t>((static_cast<uint128_t>(next()) * n) >> 64);
  }

  // Uniform in [lo, hi] (lo <= hi).
  constexpr std::uint64_t between(std::uint64_t lo, std::uint64_t hi) noexcept {
    return lo + below(hi - lo + 1);
  }

  // Uniform double in [0, 1).
  constexpr double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Log-uniform integer in [lo, hi] (0 < lo <= hi): every doubling of the
  // size is about as likely, as in programs that mix small and larger objects.
  std::uint64_t log_uniform(std::uint64_t lo, std::uint64_t hi) noexcept {
    const double log_lo = std::log(static_cast<double>(lo));
    const double log_span = std::log(static_cast<double>(hi) + 1) - log_lo;
    const auto v = static_cast<std::uint64_t>(std::exp(log_lo + uniform() * log_span));
    return v < lo ? lo : v > hi ? hi : v;
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  std::uint64_t s_[4]{};
};

}  // namespace lazybench
