// alloc-pair: the small-object fast path.
//
// Each thread mallocs an object of a random size in [--min, --max] (16-512
// bytes by default), writes to it and frees it, in a loop.  With --window W
// > 0 each thread instead keeps the last W objects live in a ring and frees
// the oldest when it allocates a new one, so objects are not always reused at
// once.  Sizes come from a pre-generated table so the random number generator
// stays out of the measurement.
//
// Metric: malloc/free pairs per second over all threads.
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

class AllocPair final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads");
    o.size("--min", &min_, "Smallest object");
    o.size("--max", &max_, "Largest object");
    o.count("--window", &window_, "Objects kept live per thread (0 = free at once)");
  }

  std::string validate() override {
    if (threads_ == 0) return "--threads must be > 0";
    if (min_ == 0 || min_ > max_) return "need 0 < --min <= --max";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    constexpr std::size_t kTable = 4096;  // power of two
    constexpr std::uint64_t kCheckEvery = 256;
    const auto threads = static_cast<unsigned>(threads_);
    std::vector<std::vector<std::uint32_t>> sizes(threads, std::vector<std::uint32_t>(kTable));
    std::vector<std::vector<unsigned char*>> rings(threads, std::vector<unsigned char*>(window_, nullptr));
    for (unsigned t = 0; t < threads; ++t) {
      Rng rng(Rng::derive(seed, t));
      for (auto& s : sizes[t]) s = static_cast<std::uint32_t>(rng.between(min_, max_));
    }
    std::vector<std::uint64_t> pairs(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          const auto& table = sizes[t];
          auto& ring = rings[t];
          std::uint64_t i = 0;
          while (!stop.stopped()) {
            for (std::uint64_t j = 0; j < kCheckEvery; ++j, ++i) {
              const std::size_t sz = table[i & (kTable - 1)];
              auto* p = static_cast<unsigned char*>(checked_malloc(sz));
              p[0] = static_cast<unsigned char>(i);
              p[sz - 1] = 1;
              escape(p);
              if (window_ == 0) {
                std::free(p);
              } else {
                auto& slot = ring[i % window_];
                std::free(slot);
                slot = p;
              }
            }
          }
          pairs[t] = i;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });
    for (auto& ring : rings)
      for (auto* p : ring) std::free(p);
    std::uint64_t total = 0;
    for (auto n : pairs) total += n;
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "pairs/s", true};
    out.extra = {{"threads", static_cast<double>(threads)},
                 {"pairs", static_cast<double>(total)},
                 {"ns_per_pair_per_thread", total ? elapsed * 1e9 * threads / static_cast<double>(total) : 0}};
    return out;
  }

 private:
  double seconds_ = 3;
  std::uint64_t threads_ = 1;
  std::uint64_t min_ = 16;
  std::uint64_t max_ = 512;
  std::uint64_t window_ = 0;
};

}  // namespace

std::unique_ptr<Workload> make_alloc_pair() { return std::make_unique<AllocPair>(); }

}  // namespace lazybench
