// The timeline page: how `lazymalloc-run --timeline` reads the allocator's
// gauges from another process.  lazymalloc-run creates one page (a memfd),
// writes kMagic and, in its child before exec, the child's pid, and passes
// the descriptor as LAZYMALLOC_TIMELINE_FD (Opt::timeline_fd).  The
// allocator of that process (and of no other: the pid must match, so a
// descendant that inherits the variable or a forked child never writes)
// maps it and publishes its page-state gauges there at the end of every
// backend operation that changes them (under the backend lock: the slow
// paths and the purges, never the fast path).  Without the option there is
// no page and no cost but one predictable branch in those slow paths.
//
// A seqlock: `seq` is odd while a publish is in progress; a reader retries
// until it reads the same even value before and after the gauges.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lazymalloc {

struct TimelinePage {
  static constexpr uint64_t kMagic = 0x31656e696c656d74ull;  // "tmeline1"
  static constexpr size_t kSize = 4096;

  uint64_t magic;              // kMagic, written by lazymalloc-run
  std::atomic<int64_t> pid;    // the one process that publishes
  std::atomic<uint64_t> seq;   // seqlock
  std::atomic<uint64_t> publishes;
  std::atomic<uint64_t> active_bytes;
  std::atomic<uint64_t> retained_bytes;
  std::atomic<uint64_t> lazy_bytes;
  std::atomic<uint64_t> clean_bytes;
  std::atomic<uint64_t> reserved_bytes;
  // Rows lazymalloc-run has written so far (bumped after each): a program
  // under test can wait on it instead of guessing how long a sample takes.
  std::atomic<uint64_t> samples;
  // Bytes of free objects in the threads' caches (small-object bins and
  // large-block caches), which the frontend keeps up to date on its slow
  // paths while the page is attached (added differences; not part of the
  // seqlock: the caches change outside the backend).  Part of `active`.
  std::atomic<int64_t> cached_bytes;

  struct Gauges {
    uint64_t publishes, active, retained, lazy, clean, reserved, cached;
  };

  // The frontend's side: the caches grew (or shrank) by `delta` bytes.
  void cached_add(int64_t delta) { cached_bytes.fetch_add(delta, std::memory_order_relaxed); }

  // The allocator's side (one writer at a time: the caller holds the
  // backend lock).
  void publish(const Gauges& g) {
    const uint64_t s = seq.load(std::memory_order_relaxed);
    seq.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    active_bytes.store(g.active, std::memory_order_relaxed);
    retained_bytes.store(g.retained, std::memory_order_relaxed);
    lazy_bytes.store(g.lazy, std::memory_order_relaxed);
    clean_bytes.store(g.clean, std::memory_order_relaxed);
    reserved_bytes.store(g.reserved, std::memory_order_relaxed);
    publishes.store(publishes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    seq.store(s + 2, std::memory_order_release);
  }

  // The reader's side: false while a publish is in progress (try again).
  bool load(Gauges* out) const {
    const uint64_t s1 = seq.load(std::memory_order_acquire);
    if (s1 & 1) return false;
    Gauges g;
    g.publishes = publishes.load(std::memory_order_relaxed);
    g.active = active_bytes.load(std::memory_order_relaxed);
    g.retained = retained_bytes.load(std::memory_order_relaxed);
    g.lazy = lazy_bytes.load(std::memory_order_relaxed);
    g.clean = clean_bytes.load(std::memory_order_relaxed);
    g.reserved = reserved_bytes.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq.load(std::memory_order_relaxed) != s1) return false;
    const int64_t cached = cached_bytes.load(std::memory_order_relaxed);
    g.cached = cached > 0 ? uint64_t(cached) : 0;
    *out = g;
    return true;
  }
};

static_assert(sizeof(TimelinePage) <= TimelinePage::kSize);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the page is shared between processes");

}  // namespace lazymalloc
