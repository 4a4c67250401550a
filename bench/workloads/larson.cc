// larson: server-style churn with objects that outlive their thread's round.
//
// After Larson and Krishnan's benchmark (as in mimalloc-bench): each thread
// owns an array of --slots objects of random sizes in [--min, --max]; a round
// is --round-ops replacements (free a random slot, malloc a new random-size
// object into it, write to it).  Between rounds the arrays move on to the next
// thread (array i goes to thread i+1), so most frees are of objects another
// thread allocated: the remote-free path of every allocator.
//
// Metric: replacements (one free + one malloc) per second over all threads.
#include <barrier>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

class Larson final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads (0 = one per CPU)");
    o.count("--slots", &slots_, "Live objects per thread");
    o.size("--min", &min_, "Smallest object");
    o.size("--max", &max_, "Largest object");
    o.count("--round-ops", &round_ops_, "Replacements per thread between hand-overs");
  }

  std::string validate() override {
    if (slots_ == 0 || round_ops_ == 0) return "--slots and --round-ops must be > 0";
    if (min_ == 0 || min_ > max_) return "need 0 < --min <= --max";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    const unsigned threads = threads_ ? static_cast<unsigned>(threads_) : online_cpus();
    std::vector<std::vector<unsigned char*>> arrays(threads, std::vector<unsigned char*>(slots_, nullptr));
    std::vector<std::uint64_t> ops(threads, 0);
    std::atomic<bool> finish{false};
    std::atomic<bool> deadline_passed{false};
    unsigned shift = 0;  // array for thread t in this round: (t + shift) % threads
    std::uint64_t rounds = 0;
    // Runs once per round, when every thread has arrived.
    auto on_round_end = [&]() noexcept {
      ++rounds;
      shift = (shift + 1) % threads;
      if (deadline_passed.load(std::memory_order_relaxed)) finish.store(true, std::memory_order_relaxed);
    };
    std::barrier sync(static_cast<std::ptrdiff_t>(threads), on_round_end);

    // Fill the arrays (thread t fills array t) before the clock starts.
    {
      Rng rng(Rng::derive(seed, 1000));
      for (auto& array : arrays)
        for (auto& slot : array) {
          const std::size_t sz = rng.between(min_, max_);
          slot = static_cast<unsigned char*>(checked_malloc(sz));
          slot[0] = static_cast<unsigned char>(sz);
        }
    }

    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          Rng rng(Rng::derive(seed, t));
          std::uint64_t local = 0;
          try {
          while (true) {
            auto& array = arrays[(t + shift) % threads];
            for (std::uint64_t i = 0; i < round_ops_; ++i) {
              const std::size_t k = rng.below(slots_);
              std::free(array[k]);
              const std::size_t sz = rng.between(min_, max_);
              auto* p = static_cast<unsigned char*>(checked_malloc(sz));
              p[0] = static_cast<unsigned char>(sz);
              p[sz - 1] = 1;
              array[k] = p;
            }
            local += round_ops_;
            if (stop.stopped()) deadline_passed.store(true, std::memory_order_relaxed);
            sync.arrive_and_wait();
            if (finish.load(std::memory_order_relaxed)) break;
          }
          } catch (...) {
            // Leave the barrier so the other threads do not wait for us.
            sync.arrive_and_drop();
            throw;
          }
          ops[t] = local;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });

    for (auto& array : arrays)
      for (auto* p : array) std::free(p);
    std::uint64_t total = 0;
    for (auto n : ops) total += n;
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "ops/s", true};
    out.extra = {{"threads", static_cast<double>(threads)},
                 {"rounds", static_cast<double>(rounds)},
                 {"ops", static_cast<double>(total)}};
    return out;
  }

 private:
  double seconds_ = 5;
  std::uint64_t threads_ = 0;
  std::uint64_t slots_ = 5000;
  std::uint64_t min_ = 8;
  std::uint64_t max_ = 1024;
  std::uint64_t round_ops_ = 10000;
};

}  // namespace

std::unique_ptr<Workload> make_larson() { return std::make_unique<Larson>(); }

}  // namespace lazybench
