// malloc-large: churn of large blocks (after mimalloc-bench's malloc-large).
//
// Keeps --slots blocks live; each operation replaces a random slot with a new
// block of a random size in [--min, --max] (1-32 MiB by default) and writes
// to the first --touch fraction of its pages.  These sizes are far above
// every allocator's small-object machinery, so this measures the large-block
// path: mmap/munmap or reuse of retained regions, and the page faults that
// follow a release.  Unlike mimalloc-bench (which never touches the blocks),
// part of each block is written, as a real program would.
//
// Metric: replacements per second.
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

class MallocLarge final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads, each with its own slots");
    o.count("--slots", &slots_, "Live blocks per thread");
    o.size("--min", &min_, "Smallest block");
    o.size("--max", &max_, "Largest block");
    o.real("--touch", &touch_, "Fraction of each block's pages written (0..1)");
  }

  std::string validate() override {
    if (slots_ == 0 || threads_ == 0) return "--slots and --threads must be > 0";
    if (min_ == 0 || min_ > max_) return "need 0 < --min <= --max";
    if (touch_ < 0 || touch_ > 1) return "--touch must be in [0, 1]";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    const auto threads = static_cast<unsigned>(threads_);
    std::vector<std::vector<void*>> live(threads, std::vector<void*>(slots_, nullptr));
    std::vector<std::uint64_t> ops(threads, 0), bytes(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          Rng rng(Rng::derive(seed, t));
          auto& slots = live[t];
          std::uint64_t local_ops = 0, local_bytes = 0;
          while (!stop.stopped()) {
            const std::size_t k = rng.below(slots_);
            std::free(slots[k]);
            slots[k] = nullptr;
            const std::size_t sz = rng.between(min_, max_);
            void* p = checked_malloc(sz);
            touch_pages(p, static_cast<std::size_t>(static_cast<double>(sz) * touch_));
            escape(p);
            slots[k] = p;
            ++local_ops;
            local_bytes += sz;
          }
          ops[t] = local_ops;
          bytes[t] = local_bytes;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });
    for (auto& slots : live)
      for (void* p : slots) std::free(p);
    std::uint64_t total = 0, total_bytes = 0;
    for (unsigned t = 0; t < threads; ++t) {
      total += ops[t];
      total_bytes += bytes[t];
    }
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "ops/s", true};
    out.extra = {{"threads", static_cast<double>(threads)},
                 {"ops", static_cast<double>(total)},
                 {"mean_block_mib", total ? static_cast<double>(total_bytes) / static_cast<double>(total) / 1048576.0 : 0}};
    return out;
  }

 private:
  double seconds_ = 5;
  std::uint64_t threads_ = 1;
  std::uint64_t slots_ = 8;
  std::uint64_t min_ = 1 << 20;
  std::uint64_t max_ = 32 << 20;
  double touch_ = 0.25;
};

}  // namespace

std::unique_ptr<Workload> make_malloc_large() { return std::make_unique<MallocLarge>(); }

}  // namespace lazybench
