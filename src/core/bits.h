// Bit and alignment helpers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lazymalloc {

constexpr bool is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }
constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }
constexpr uintptr_t align_down(uintptr_t x, size_t a) { return x & ~(uintptr_t(a) - 1); }
inline unsigned log2_floor(size_t x) { return 63u - unsigned(__builtin_clzll(x)); }
inline unsigned ctz32(uint32_t x) { return unsigned(__builtin_ctz(x)); }
inline unsigned popcount32(uint32_t x) { return unsigned(__builtin_popcount(x)); }

// Mask of `n` bits starting at bit `first` (n may be 32).
constexpr uint32_t bit_range(unsigned first, unsigned n) {
  return (n >= 32 ? ~uint32_t{0} : ((uint32_t{1} << n) - 1)) << first;
}

// Lowest index of a run of `n` zero bits in `used` (32 bits), or -1.
inline int find_zero_run(uint32_t used, unsigned n) {
  if (n == 0 || n > 32) return -1;
  if (n == 32) return used == 0 ? 0 : -1;
  uint32_t free = ~used;
  // After k steps, bit i of `acc` is set iff bits i..i+k are all free.
  uint32_t acc = free;
  for (unsigned k = 1; k < n && acc; ++k) acc &= free >> k;
  // Runs must not wrap past bit 31.
  acc &= (n == 1) ? ~uint32_t{0} : (~uint32_t{0} >> (n - 1));
  return acc ? int(ctz32(acc)) : -1;
}

#define LM_LIKELY(x) __builtin_expect(!!(x), 1)
#define LM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LM_NOINLINE __attribute__((noinline))
// A failure path that fast paths tail-call: gcc must not see that it never
// returns (it would then call it, which costs the caller a stack frame), and
// must know that it does not throw (inlined into a caller built with
// exceptions, such as operator delete, a call that may throw is no tail
// call either).
#if defined(__clang__)
#define LM_FAILURE_PATH __attribute__((noinline, nothrow))
#else
#define LM_FAILURE_PATH __attribute__((noipa, nothrow))
#endif
#define LM_INLINE inline __attribute__((always_inline))

}  // namespace lazymalloc
