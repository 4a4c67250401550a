// The adviser: how ranges of free memory are given back to the kernel.
// Mechanism only; which ranges and when is the purger's business
// (purger.h), and the discarder's (discard.h).
//
// One advice for many ranges is one process_madvise(2) call where the
// kernel takes it; the first refusal that means "never here" (ENOSYS,
// EINVAL, EPERM, EBADF) switches to one madvise per range for good.
// MADV_FREE refused with EINVAL (kernels before 4.5, some emulators)
// switches to MADV_DONTNEED for good.  Both switches are remembered here and
// shown once in the statistics (purge_vector_unsupported,
// purge_free_unsupported).  Safe from several threads at once, no lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/stats.h"
#include "pal/pal.h"

namespace lazymalloc {

class Adviser {
 public:
  constexpr Adviser() = default;
  void init(const Platform* platform, Stats* stats) {
    platform_ = platform;
    stats_ = stats;
  }

  // One advice for `n` ranges: one vector call where the kernel takes it,
  // else madvise per range (stopping at an EINVAL for MADV_FREE, which the
  // caller retries as MADV_DONTNEED).  0 or an errno value; *calls gets the
  // system calls made.  Counts nothing but the switches above.
  int advise_ranges(const AdviseRange* ranges, unsigned n, Advice advice, unsigned* calls);
  // Advises `n` ranges of `bytes` in all: MADV_FREE, or MADV_DONTNEED when
  // `dontneed` or when the kernel refuses MADV_FREE.  Counts calls, bytes,
  // time and failures (purge_*).  Returns 0 or the kernel's errno; *clean
  // tells which advice took effect, *ns (if given) the time it took.
  int advise(const AdviseRange* ranges, unsigned n, size_t bytes, bool dontneed, bool* clean,
             uint64_t* ns = nullptr);

  bool free_unsupported() const { return free_unsupported_.load(std::memory_order_relaxed); }
  bool vector_unsupported() const { return vector_refused_.load(std::memory_order_relaxed); }

 private:
  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
  std::atomic<bool> free_unsupported_{false};
  std::atomic<bool> vector_refused_{false};
};

}  // namespace lazymalloc
