// mleak: many short-lived threads, each leaving behind one small object,
// after the mleak program of the allocator benchmark suites.
//
// Rounds of --threads (10) threads are started and joined, for -S seconds
// (or exactly --rounds rounds: a fixed amount of work, for instruction,
// fault and system call counts per thread that runs can be compared by).
// Each thread callocs one object of --size bytes (128), swaps it into a
// random slot of a shared table of --slots (1000), and frees what was there:
// an object that another, finished, thread allocated.  So every thread sets
// up its per-thread state, allocates once, frees someone else's memory and
// exits holding memory the process still uses: allocators that pay much to
// set up or tear down a thread, wake a helper thread at every exit, or keep
// a dead thread's memory from the living leak time or memory here.  The
// table is freed after the measurement.
//
// Metric: threads per second.
#include <pthread.h>

#include <atomic>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

struct Shared {
  std::vector<std::atomic<void*>>* table;
  std::size_t size;
};

struct ThreadArg {
  const Shared* shared;
  std::uint64_t slot;
};

void* leak_one(void* raw) {
  auto* arg = static_cast<ThreadArg*>(raw);
  const Shared& sh = *arg->shared;
  void* p = std::calloc(1, sh.size);
  if (p) static_cast<unsigned char*>(p)[sh.size - 1] = 1;
  std::free((*sh.table)[arg->slot].exchange(p, std::memory_order_acq_rel));
  return p;  // null: calloc failed (the caller reports it)
}

class Mleak final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads started and joined per round");
    o.size("--size", &size_, "Bytes each thread allocates");
    o.count("--slots", &slots_, "Objects the threads leave behind (a shared table)");
    o.count("--rounds", &rounds_, "Run exactly this many rounds instead of -S seconds (0: timed)");
  }

  std::string validate() override {
    if (threads_ == 0) return "--threads must be > 0";
    if (size_ == 0) return "--size must be > 0";
    if (slots_ == 0) return "--slots must be > 0";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    std::vector<std::atomic<void*>> table(slots_);
    for (auto& slot : table) slot.store(nullptr, std::memory_order_relaxed);
    const Shared shared{&table, size_};
    const auto n = static_cast<unsigned>(threads_);
    std::vector<pthread_t> ids(n);
    std::vector<ThreadArg> args(n, ThreadArg{&shared, 0});
    std::uint64_t started = 0;
    Rng rng(seed);
    const auto round = [&] {
      unsigned created = 0;
      for (; created < n; ++created) {
        args[created].slot = rng.below(slots_);
        if (pthread_create(&ids[created], nullptr, leak_one, &args[created]) != 0) break;
      }
      // Every thread started is joined before any error is thrown:
      // they use args and the table.
      bool failed = false;
      for (unsigned i = 0; i < created; ++i) {
        void* result = nullptr;
        pthread_join(ids[i], &result);
        failed |= result == nullptr;
      }
      if (created < n) throw WorkloadError("mleak: pthread_create failed");
      if (failed) throw WorkloadError("mleak: calloc returned NULL");
      started += n;
    };
    double elapsed = 0;
    if (rounds_ > 0) {
      measure.begin();
      const auto start = Clock::now();
      for (std::uint64_t r = 0; r < rounds_; ++r) round();
      elapsed = seconds_since(start);
      measure.end();
    } else {
      elapsed = run_timed_threads(
          1, seconds_,
          [&](unsigned, const StopFlag& stop) {
            while (!stop.stopped()) round();
          },
          [&] { measure.begin(); }, [&] { measure.end(); });
    }
    for (auto& slot : table) std::free(slot.load(std::memory_order_relaxed));
    Outcome out;
    out.metric = {"throughput", static_cast<double>(started) / elapsed, "threads/s", true};
    out.extra = {{"threads", static_cast<double>(started)}};
    return out;
  }

 private:
  double seconds_ = 3;
  std::uint64_t threads_ = 10;
  std::uint64_t size_ = 128;
  std::uint64_t slots_ = 1000;
  std::uint64_t rounds_ = 0;
};

}  // namespace

std::unique_ptr<Workload> make_mleak() { return std::make_unique<Mleak>(); }

}  // namespace lazybench
