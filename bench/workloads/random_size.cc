// random-size: one thread's churn of random sizes and random lifetimes, in
// the spirit of glibc's malloc benchmarks.
//
// --slots (4096) live objects; each operation frees a random slot and puts in
// a new object whose size is log-uniform in --min..--max (16 B-4 KiB: every
// size octave equally often, as programs' sizes spread over the classes), and
// writes its first and last byte.  Sizes and slots come from a pre-generated
// table so the generator stays out of the loop.  -t threads each have their
// own slots (default 1).
//
// Metric: operations (one free and one malloc) per second over all threads.
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

class RandomSize final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads, each with its own slots");
    o.size("--min", &min_, "Smallest object");
    o.size("--max", &max_, "Largest object");
    o.count("--slots", &slots_, "Live objects per thread");
  }

  std::string validate() override {
    if (threads_ == 0) return "--threads must be > 0";
    if (min_ == 0 || min_ > max_) return "need 0 < --min <= --max";
    if (slots_ == 0) return "--slots must be > 0";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    constexpr std::size_t kTable = 1 << 16;  // power of two
    struct Op {
      std::uint32_t slot, size;
    };
    const auto threads = static_cast<unsigned>(threads_);
    std::vector<std::vector<Op>> ops(threads, std::vector<Op>(kTable));
    for (unsigned t = 0; t < threads; ++t) {
      Rng rng(Rng::derive(seed, t));
      for (auto& op : ops[t]) {
        op.slot = static_cast<std::uint32_t>(rng.below(slots_));
        op.size = static_cast<std::uint32_t>(rng.log_uniform(min_, max_));
      }
    }
    std::vector<std::vector<unsigned char*>> slots(threads, std::vector<unsigned char*>(slots_, nullptr));
    std::vector<std::uint64_t> done(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          const auto& table = ops[t];
          auto& live = slots[t];
          std::uint64_t i = 0;
          while (!stop.stopped()) {
            for (int j = 0; j < 256; ++j, ++i) {
              const Op op = table[i & (kTable - 1)];
              auto* p = static_cast<unsigned char*>(checked_malloc(op.size));
              p[0] = static_cast<unsigned char>(i);
              p[op.size - 1] = 1;
              std::free(live[op.slot]);
              live[op.slot] = p;
            }
          }
          done[t] = i;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });
    for (auto& live : slots)
      for (auto* p : live) std::free(p);
    std::uint64_t total = 0;
    for (auto n : done) total += n;
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "ops/s", true};
    out.extra = {{"threads", static_cast<double>(threads)}, {"ops", static_cast<double>(total)}};
    return out;
  }

 private:
  double seconds_ = 3;
  std::uint64_t threads_ = 1;
  std::uint64_t min_ = 16;
  std::uint64_t max_ = 4096;
  std::uint64_t slots_ = 4096;
};

}  // namespace

std::unique_ptr<Workload> make_random_size() { return std::make_unique<RandomSize>(); }

}  // namespace lazybench
