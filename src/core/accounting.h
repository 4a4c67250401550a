// Accounting: the counters that decisions read, kept apart from the
// statistics (core/stats.h).  Statistics are written for reporting only and
// read only to be printed, so they could be sharded per thread or compiled
// down; a decision (the hard limit, the huge-block keep rule, the soft limit
// and pressure checks, the background thread's deadlines, the mremap cap)
// reads a Gauge here instead, owned by the component that updates it, next
// to the statistic that reports the same quantity.
//
//   PageAccounting     Backend        page states of the arenas' bytes
//   ReleaseAccounting  Releaser       huge-block releases in flight, workers
//   DiscardAccounting  Discardable    live and discarded discardable bytes
//   (a Gauge)          frontend       mremap moves made (large.cc)
#pragma once

#include <atomic>
#include <cstdint>

namespace lazymalloc {

// One counter of the control state: a relaxed atomic.  Gauges may go down;
// the owner changes them, anyone reads them.
class Gauge {
 public:
  constexpr Gauge() = default;
  void add(uint64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  void sub(uint64_t n) { v_.fetch_sub(n, std::memory_order_relaxed); }
  void set(uint64_t n) { v_.store(n, std::memory_order_relaxed); }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// The backend's bytes by page state (changed under the backend lock).
struct PageAccounting {
  Gauge reserved;  // address space of the arenas
  Gauge active;    // in spans handed out
  Gauge retained;  // free and resident
  Gauge lazy;      // free, given MADV_FREE
  Gauge clean;     // free, reading as zero
  Gauge huge;      // in live huge blocks (part of active)
  // Pages purged inside live small spans (part of active; the frontend
  // keeps it, span_purge.cc): the hugepage advice reads what is resident.
  Gauge span_purged;
};

// Huge-block releases (purge/release.h).
struct ReleaseAccounting {
  Gauge inflight_bytes;  // queued or being advised, not yet settled
  Gauge threads;         // release workers running
};

// Discardable blocks (purge/discard.h).
struct DiscardAccounting {
  Gauge bytes;            // live blocks, any state
  Gauge discarded_bytes;  // live blocks discarded and not locked since
};

}  // namespace lazymalloc
