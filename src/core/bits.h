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

// Where a run of `n` units would go in a slot with `used` units taken, of
// which free ones in `resident` are resident (RETAINED or LAZY): among the
// slot's maximal free runs (holes) of at least `n` units, the window at
// either end of a hole (a hole is never split in three) with the fewest
// units outside `resident` (`fresh`: new memory), then the smallest hole
// (`spare`: units the hole keeps), then the lowest index.  For
// Backend::choose_units.
struct UnitFit {
  unsigned index = 0;
  unsigned fresh = 33;  // 33: nothing fits
  unsigned spare = 0;
  bool found() const { return fresh <= 32; }
  bool better_than(const UnitFit& o) const { return fresh != o.fresh ? fresh < o.fresh : spare < o.spare; }
  bool perfect() const { return fresh == 0 && spare == 0; }
};
inline UnitFit fit_units(uint32_t used, uint32_t resident, unsigned n) {
  UnitFit best;
  if (n == 0 || n > 32) return best;
  uint32_t free = ~used;
  while (free) {
    unsigned start = ctz32(free);
    // The hole: free bits from `start` up to the next used bit (or bit 32).
    uint32_t above = start == 0 ? free : free >> start;
    unsigned len = ~above == 0 ? 32 - start : ctz32(~above);
    if (len > 32 - start) len = 32 - start;
    if (len >= n) {
      unsigned spare = len - n;
      // The hole's low end, then (if it differs) its high end.
      for (unsigned at = start;; at += spare) {
        UnitFit f;
        f.index = at;
        f.fresh = popcount32(bit_range(at, n) & ~resident);
        f.spare = spare;
        if (!best.found() || f.better_than(best)) best = f;
        if (spare == 0 || at != start) break;
      }
    }
    if (start + len >= 32) break;
    free &= ~bit_range(start, len);
  }
  return best;
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
