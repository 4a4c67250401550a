// mixed: a general-purpose program's allocation pattern, in the spirit of
// espresso and cfrac from the classic allocator benchmarks.
//
// Sizes are mostly small with a long tail: 60% 16-64 B, 25% 64-512 B, 10%
// 512 B-4 KiB, 4% 4-32 KiB, 1% 32-256 KiB.  Lifetimes, counted in
// allocations, are mostly short (exponential, mean --mean-life) with
// --long-pct percent living up to --max-life.  Each allocation goes into the
// bucket of a timing wheel for the step at which it dies; every step frees
// that bucket.  The buckets are linked lists threaded through the objects
// themselves, so the harness allocates nothing beside the workload.
//
// Metric: allocations per second over all threads (each is freed later, so
// an operation is one malloc and, in steady state, one free).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

struct Node {
  Node* next;
  std::uint32_t size;
  std::uint32_t tag;
};

class Mixed final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads, each with its own live set");
    o.real("--mean-life", &mean_life_, "Mean lifetime of short-lived objects (allocations)");
    o.count("--max-life", &max_life_, "Longest lifetime (allocations); the live set is about this big");
    o.real("--long-pct", &long_pct_, "Percent of objects with a uniform lifetime up to --max-life");
  }

  std::string validate() override {
    if (threads_ == 0) return "--threads must be > 0";
    if (max_life_ < 2) return "--max-life must be >= 2";
    if (mean_life_ <= 0) return "--mean-life must be > 0";
    if (long_pct_ < 0 || long_pct_ > 100) return "--long-pct must be in [0, 100]";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    const auto threads = static_cast<unsigned>(threads_);
    const std::size_t wheel_size = max_life_ + 1;
    std::vector<std::vector<Node*>> wheels(threads, std::vector<Node*>(wheel_size, nullptr));
    std::vector<std::uint64_t> allocs(threads, 0), peak_live(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          Rng rng(Rng::derive(seed, t));
          auto& wheel = wheels[t];
          std::uint64_t step = 0, live = 0, local_peak = 0;
          while (!stop.stopped()) {
            for (int j = 0; j < 64; ++j, ++step) {
              const std::size_t sz = pick_size(rng);
              auto* n = static_cast<Node*>(checked_malloc(sz));
              n->size = static_cast<std::uint32_t>(sz);
              n->tag = static_cast<std::uint32_t>(step);
              reinterpret_cast<unsigned char*>(n)[sz - 1] = 0x5A;
              const std::uint64_t life = pick_life(rng);
              Node*& bucket = wheel[(step + life) % wheel_size];
              n->next = bucket;
              bucket = n;
              ++live;
              // Free everything that dies at this step.
              Node*& due = wheel[step % wheel_size];
              Node* d = due;
              due = nullptr;
              while (d) {
                Node* next = d->next;
                if (reinterpret_cast<unsigned char*>(d)[d->size - 1] != 0x5A)
                  throw WorkloadError("mixed: object content changed");
                std::free(d);
                --live;
                d = next;
              }
            }
            if (live > local_peak) local_peak = live;
          }
          allocs[t] = step;
          peak_live[t] = local_peak;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });
    for (auto& wheel : wheels)
      for (Node* n : wheel)
        while (n) {
          Node* next = n->next;
          std::free(n);
          n = next;
        }
    std::uint64_t total = 0, peak = 0;
    for (unsigned t = 0; t < threads; ++t) {
      total += allocs[t];
      peak += peak_live[t];
    }
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "allocs/s", true};
    out.extra = {{"threads", static_cast<double>(threads)},
                 {"allocs", static_cast<double>(total)},
                 {"peak_live_objects", static_cast<double>(peak)}};
    return out;
  }

 private:
  static std::size_t pick_size(Rng& rng) {
    const std::uint64_t r = rng.below(100);
    if (r < 60) return rng.between(16, 64);
    if (r < 85) return rng.between(65, 512);
    if (r < 95) return rng.between(513, 4096);
    if (r < 99) return rng.between(4097, 32768);
    return rng.between(32769, 262144);
  }

  std::uint64_t pick_life(Rng& rng) const {
    if (rng.uniform() * 100 < long_pct_) return rng.between(1, max_life_);
    const double l = -std::log(1.0 - rng.uniform()) * mean_life_;
    return std::clamp<std::uint64_t>(static_cast<std::uint64_t>(l) + 1, 1, max_life_);
  }

  double seconds_ = 3;
  std::uint64_t threads_ = 1;
  double mean_life_ = 32;
  std::uint64_t max_life_ = 100000;
  double long_pct_ = 10;
};

}  // namespace

std::unique_ptr<Workload> make_mixed() { return std::make_unique<Mixed>(); }

}  // namespace lazybench
