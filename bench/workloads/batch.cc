// batch: batches of same-size small objects allocated, then freed together,
// after glibc's bench-malloc-simple (the glibc-simple program of the
// allocator benchmark suites), which mallocs 25, 100, 400 or 1600 blocks of
// one size and frees them in the same order.
//
// Each batch has a size log-uniform in --min..--max (16-512 B) and a count
// log-uniform in --min-batch..--max-batch (25-1600); every object is written
// (first and last byte) when allocated and read back before it is freed,
// oldest first.  Sizes and counts come from a pre-generated table so the
// generator stays out of the loop.  -t threads each run their own batches.
//
// Metric: malloc/free pairs per second over all threads.
#include <stdexcept>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

class Batch final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads, each with its own batches");
    o.size("--min", &min_, "Smallest object");
    o.size("--max", &max_, "Largest object");
    o.count("--min-batch", &min_batch_, "Fewest objects in a batch");
    o.count("--max-batch", &max_batch_, "Most objects in a batch");
  }

  std::string validate() override {
    if (threads_ == 0) return "--threads must be > 0";
    if (min_ == 0 || min_ > max_) return "need 0 < --min <= --max";
    if (min_batch_ == 0 || min_batch_ > max_batch_) return "need 0 < --min-batch <= --max-batch";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    constexpr std::size_t kTable = 1024;  // power of two
    struct Round {
      std::uint32_t size, count;
    };
    const auto threads = static_cast<unsigned>(threads_);
    std::vector<std::vector<Round>> rounds(threads, std::vector<Round>(kTable));
    for (unsigned t = 0; t < threads; ++t) {
      Rng rng(Rng::derive(seed, t));
      for (auto& r : rounds[t]) {
        r.size = static_cast<std::uint32_t>(rng.log_uniform(min_, max_));
        r.count = static_cast<std::uint32_t>(rng.log_uniform(min_batch_, max_batch_));
      }
    }
    std::vector<std::vector<unsigned char*>> live(threads, std::vector<unsigned char*>(max_batch_));
    std::vector<std::uint64_t> pairs(threads, 0);
    std::vector<std::uint64_t> bad(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          const auto& table = rounds[t];
          auto& objs = live[t];
          std::uint64_t n = 0;
          for (std::uint64_t i = 0; !stop.stopped(); ++i) {
            const Round r = table[i & (kTable - 1)];
            const auto mark = static_cast<unsigned char>(i);
            for (std::uint32_t k = 0; k < r.count; ++k) {
              auto* p = static_cast<unsigned char*>(checked_malloc(r.size));
              p[0] = mark;
              p[r.size - 1] = mark;
              objs[k] = p;
            }
            for (std::uint32_t k = 0; k < r.count; ++k) {
              unsigned char* p = objs[k];
              bad[t] += p[0] != mark || p[r.size - 1] != mark;
              std::free(p);
            }
            n += r.count;
          }
          pairs[t] = n;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });
    std::uint64_t total = 0, wrong = 0;
    for (unsigned t = 0; t < threads; ++t) total += pairs[t], wrong += bad[t];
    if (wrong != 0) throw std::runtime_error("an object changed while it was live");
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "pairs/s", true};
    out.extra = {{"threads", static_cast<double>(threads)}, {"pairs", static_cast<double>(total)}};
    return out;
  }

 private:
  double seconds_ = 3;
  std::uint64_t threads_ = 1;
  std::uint64_t min_ = 16;
  std::uint64_t max_ = 512;
  std::uint64_t min_batch_ = 25;
  std::uint64_t max_batch_ = 1600;
};

}  // namespace

std::unique_ptr<Workload> make_batch() { return std::make_unique<Batch>(); }

}  // namespace lazybench
