// idle-release: how much memory a program still holds after it freed its
// small objects and went idle.
//
// --total bytes of --size-byte objects are allocated (every byte written) and
// freed in one of four ways (--case):
//   a  one thread allocates and frees everything;
//   b  a worker thread allocates and frees everything, then blocks on a
//      condition variable until the end of the run;
//   c  a worker thread allocates, the main thread frees everything
//      (cross-thread frees), and the worker stays alive, blocked;
//   d  one thread allocates and frees a random 90% (seeded), in random order;
//      the other 10% stay live until the end.
// a, b and c free in allocation order.  Then the main thread sleeps --idle
// seconds: a plain sleep, because whatever the allocator does by itself while
// the program is idle (background threads, decay) is what is measured.  With
// --lazy-wait S it sleeps S seconds more and samples again, for allocators
// whose MADV_FREE'd memory moves on to plain release later.
//
// /proc/self/smaps_rollup is read before allocating (baseline), at the peak,
// right after freeing, after the idle and after the lazy wait.  held = Rss -
// LazyFree: what the rest of the system cannot have.  The metric is held
// after the idle minus the baseline (MiB, lower is better).  For case d the
// workload also counts the distinct 4 KiB pages that the live objects' bytes
// cover (from their addresses and --size), and reports the bound
// 1.25 x those pages + 8 MiB that issue #13 sets for held above baseline.
//
// The workload calls malloc and free only.  Everything it needs besides the
// measured objects (the pointer array, the free order, the worker thread) is
// set up before the baseline is read.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
double kib_to_mib(std::int64_t kib) { return static_cast<double>(kib) / 1024.0; }

MemSample sample_memory() {
  const auto m = read_mem_sample();
  if (!m) throw WorkloadError("idle-release: cannot read /proc/self/smaps_rollup");
  return *m;
}

// The steps of a run with a worker thread.  Each side waits (blocked on the
// condition variable) until the other has reached a step; steps only grow.
enum Step : int { kGo = 1, kAllocated, kFree, kFreed, kEnd };

class Handshake {
 public:
  void advance(int step) {
    {
      std::lock_guard lock(mutex_);
      step_ = std::max(step_, step);
    }
    cv_.notify_all();
  }
  void wait_for(int step) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return step_ >= step; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int step_ = 0;
};

class IdleRelease final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.text("--case", &case_, "a: one thread frees all; b: a worker allocates, frees all, blocks; "
                             "c: a worker allocates, main frees all, worker blocks; d: one thread frees a random 90%");
    o.size("--size", &size_, "Object size");
    o.size("--total", &total_, "Bytes allocated (every byte written)");
    o.seconds("--idle", &idle_s_, "Sleep after freeing, before the measurement");
    o.seconds("--lazy-wait", &lazy_wait_s_, "Sleep this much more and sample again (0: do not)");
  }

  std::string validate() override {
    if (case_.size() != 1 || case_[0] < 'a' || case_[0] > 'd') return "--case must be a, b, c or d";
    if (size_ == 0) return "--size must be > 0";
    if (total_ < size_) return "--total must be >= --size";
    if (total_ / size_ > UINT32_MAX) return "too many objects (--total / --size)";
    if (idle_s_ < 0 || lazy_wait_s_ < 0) return "--idle and --lazy-wait must be >= 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    const char c = case_[0];
    const std::size_t n = static_cast<std::size_t>(total_ / size_);
    objects_.assign(n, nullptr);
    // Case d: a seeded random order; the first 90% of it are freed (in that
    // order), the rest stay live.
    std::vector<std::uint32_t> order;
    std::size_t freed = n;
    if (c == 'd') {
      order.resize(n);
      for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
      Rng rng(Rng::derive(seed, 1));
      for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
      freed = n - n / 10;
    }

    Handshake hs;
    std::exception_ptr worker_error;
    std::thread worker;
    if (c == 'b' || c == 'c') {
      worker = std::thread([&, c] {
        hs.wait_for(kGo);
        try {
          allocate_all();
        } catch (...) {
          worker_error = std::current_exception();
          hs.advance(kFreed);
        }
        hs.advance(kAllocated);
        if (c == 'b' && !worker_error) {
          hs.wait_for(kFree);
          try {
            free_all();
          } catch (...) {
            worker_error = std::current_exception();
          }
          hs.advance(kFreed);
        }
        // Stay alive, blocked, until the measurement is over.
        hs.wait_for(kEnd);
      });
    }
    // Whatever happens, release and join the worker before returning.
    struct Joiner {
      Handshake& hs;
      std::thread& t;
      ~Joiner() {
        if (t.joinable()) {
          hs.advance(kEnd);
          t.join();
        }
      }
    } joiner{hs, worker};
    auto check_worker = [&] {
      if (!worker_error) return;
      hs.advance(kEnd);
      worker.join();
      std::rethrow_exception(worker_error);
    };

    const MemSample baseline = sample_memory();
    measure.begin();
    MemSample peak, after_free;
    if (worker.joinable()) {
      hs.advance(kGo);
      hs.wait_for(kAllocated);
      check_worker();
      peak = sample_memory();
      if (c == 'b') {
        hs.advance(kFree);
        hs.wait_for(kFreed);
        check_worker();
      } else {
        free_all();
      }
    } else {
      allocate_all();
      peak = sample_memory();
      if (c == 'd') {
        for (std::size_t i = 0; i < freed; ++i) free_one(order[i]);
      } else {
        free_all();
      }
    }
    after_free = sample_memory();
    sleep_seconds(idle_s_);
    const MemSample after_idle = sample_memory();
    std::optional<MemSample> after_lazy;
    if (lazy_wait_s_ > 0) {
      sleep_seconds(lazy_wait_s_);
      after_lazy = sample_memory();
    }
    measure.end();
    hs.advance(kEnd);
    if (worker.joinable()) worker.join();

    // Case d: the 4 KiB pages the live objects' bytes cover.  Counted after
    // the samples, so the page list is not part of what was measured.
    std::size_t live_pages = 0;
    if (c == 'd') {
      std::vector<std::uintptr_t> pages;
      pages.reserve((n - freed) * (size_ / kPageSize + 2));
      for (std::size_t i = freed; i < n; ++i) {
        const auto first = reinterpret_cast<std::uintptr_t>(objects_[order[i]]);
        for (std::uintptr_t p = first / kPageSize; p <= (first + size_ - 1) / kPageSize; ++p) pages.push_back(p);
      }
      std::sort(pages.begin(), pages.end());
      live_pages = static_cast<std::size_t>(std::unique(pages.begin(), pages.end()) - pages.begin());
      for (std::size_t i = freed; i < n; ++i) free_one(order[i]);
    }

    const double held_above = kib_to_mib(after_idle.held_kib() - baseline.held_kib());
    Outcome out;
    out.metric = {"held_after_idle", held_above, "MiB", false};
    out.extra = {
        {"objects", static_cast<double>(n)},
        {"object_size", static_cast<double>(size_)},
        {"total_mib", static_cast<double>(n * size_) / kMiB},
        {"idle_s", idle_s_},
        {"baseline_rss_mib", kib_to_mib(baseline.rss_kib)},
        {"baseline_held_mib", kib_to_mib(baseline.held_kib())},
        {"peak_rss_mib", kib_to_mib(peak.rss_kib)},
        {"held_after_free_mib", kib_to_mib(after_free.held_kib())},
        {"held_mib", kib_to_mib(after_idle.held_kib())},  // after the idle
        {"held_above_baseline_mib", held_above},
        {"lazyfree_mib", kib_to_mib(after_idle.lazyfree_kib)},
        {"rss_mib", kib_to_mib(after_idle.rss_kib)},
        {"rss_above_baseline_mib", kib_to_mib(after_idle.rss_kib - baseline.rss_kib)},
    };
    if (after_lazy) {
      out.extra.insert(out.extra.end(),
                       {{"lazy_wait_s", lazy_wait_s_},
                        {"rss_after_lazy_wait_mib", kib_to_mib(after_lazy->rss_kib)},
                        {"held_after_lazy_wait_mib", kib_to_mib(after_lazy->held_kib())},
                        {"rss_after_lazy_wait_above_baseline_mib", kib_to_mib(after_lazy->rss_kib - baseline.rss_kib)}});
    }
    if (c == 'd') {
      const double live_mib = static_cast<double>(live_pages * kPageSize) / kMiB;
      out.extra.insert(out.extra.end(), {{"live_objects", static_cast<double>(n - freed)},
                                         {"live_pages", static_cast<double>(live_pages)},
                                         {"live_pages_mib", live_mib},
                                         {"bound_mib", 1.25 * live_mib + 8.0}});
    }
    return out;
  }

 private:
  // Every byte of every object is written; the first byte is checked on free.
  static unsigned char fill(std::size_t i) { return static_cast<unsigned char>(i * 131 + 7); }

  void allocate_all() {
    for (std::size_t i = 0; i < objects_.size(); ++i) {
      objects_[i] = checked_malloc(size_);
      std::memset(objects_[i], fill(i), size_);
    }
  }
  void free_one(std::size_t i) {
    if (*static_cast<volatile unsigned char*>(objects_[i]) != fill(i))
      throw WorkloadError("idle-release: object content changed while allocated");
    std::free(objects_[i]);
  }
  void free_all() {
    for (std::size_t i = 0; i < objects_.size(); ++i) free_one(i);
  }

  std::string case_ = "a";
  std::uint64_t size_ = 4000;
  std::uint64_t total_ = 256ull << 20;
  double idle_s_ = 8;
  double lazy_wait_s_ = 0;
  std::vector<void*> objects_;
};

}  // namespace

std::unique_ptr<Workload> make_idle_release() { return std::make_unique<IdleRelease>(); }

}  // namespace lazybench
