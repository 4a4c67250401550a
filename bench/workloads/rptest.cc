// rptest: random sizes, random lifetimes, some frees on another thread
// (after rpmalloc's benchmark, as in mimalloc-bench).
//
// Each thread keeps --slots live objects.  An operation replaces a random
// slot's object by a new one: sizes in [--min, --max] are log-uniform, so
// small ones dominate (half of them are at most sqrt(min * max)), and
// lifetimes are mixed: half of the replacements hit the first 1/16 of the
// slots (short-lived objects), the rest any slot (long-lived ones).  A
// fraction --cross of the replaced objects is not freed by its thread but
// handed to the next thread (in batches of 64 through a locked inbox), which
// frees it: those frees are remote.  With --lockstep N the threads meet
// at a barrier every N rounds (a round: 256 replacements, then the inbox),
// so each waits, quiet, while the others finish their rounds: the pattern
// in which threads used to adopt each other's parked spans back and forth
// (issue #16), reproducible rather than left to the scheduler.
//
// An inbox holds at most --inbox-max objects: a thread whose next inbox is
// that full drains its own and waits (yields) until the next thread has
// drained its.  Unbounded (--inbox-max 0, as before issue #16's fourth
// round), a thread that the scheduler takes off its core while the other
// runs finds tens of thousands of objects waiting (up to 71,000 in a 2 s run
// on a loaded 2-core machine, 52 MiB), which are live memory beside the
// slots: peak RSS then measured the scheduler (44-103 MiB between runs of
// one build, linear in the largest backlog) more than the allocator, and
// the faster the allocator the bigger the backlog.  The bound keeps the
// backlog within about 3 MiB (4096 objects) on any machine; the steady
// state is about 64 objects a round.
//
// Metric: replacements (one malloc, one free) per second over all threads.
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

// Objects handed to a thread for it to free.
struct Inbox {
  std::mutex mutex;
  std::vector<unsigned char*> objects;
  std::atomic<std::size_t> size{0};  // objects.size(), read without the lock
};

// Threads meet here every --lockstep rounds.  A thread that sees the stop
// flag while it waits goes on (the others may have stopped already).
class Lockstep {
 public:
  explicit Lockstep(unsigned threads) : threads_(threads) {}
  // `wait` runs while the thread waits (it drains the thread's inbox, so
  // that a thread waiting for room in it is never waited for in turn).
  template <class Wait>
  void arrive(const StopFlag& stop, Wait&& wait) {
    const unsigned gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == gen && !stop.stopped()) {
      wait();
      std::this_thread::yield();
    }
  }

 private:
  const unsigned threads_;
  std::atomic<unsigned> arrived_{0};
  std::atomic<unsigned> generation_{0};
};

void free_all(std::vector<unsigned char*>& objects) {
  for (auto* p : objects) {
    if (p[0] == 0) throw WorkloadError("rptest: object content changed");
    std::free(p);
  }
  objects.clear();
}

class Rptest final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads");
    o.count("--slots", &slots_, "Live objects per thread");
    o.size("--min", &min_, "Smallest object");
    o.size("--max", &max_, "Largest object");
    o.real("--cross", &cross_, "Fraction of the objects freed by the next thread");
    o.count("--lockstep", &lockstep_, "Rounds (256 replacements each) between barriers all threads meet at (0: none)");
    o.count("--inbox-max", &inbox_max_,
            "Objects an inbox holds at most; a thread whose next inbox is full waits for it to drain (0: unbounded)");
  }

  std::string validate() override {
    if (threads_ == 0) return "--threads must be > 0";
    if (slots_ < 16) return "--slots must be >= 16";
    if (min_ == 0 || min_ > max_) return "need 0 < --min <= --max";
    if (cross_ < 0 || cross_ > 1) return "--cross must be in [0, 1]";
    if (seconds_ <= 0) return "--seconds must be > 0";
    if (inbox_max_ != 0 && inbox_max_ < 64) return "--inbox-max must be 0 or >= 64 (a batch)";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    constexpr std::size_t kTable = 4096;  // power of two
    constexpr std::size_t kBatch = 64;
    constexpr std::uint64_t kDrainEvery = 256;
    const auto threads = static_cast<unsigned>(threads_);
    const auto cross_below = static_cast<std::uint64_t>(cross_ * 65536);
    std::vector<std::vector<std::uint32_t>> sizes(threads, std::vector<std::uint32_t>(kTable));
    std::vector<std::vector<unsigned char*>> slots(threads, std::vector<unsigned char*>(slots_, nullptr));
    std::vector<Inbox> inboxes(threads);
    Lockstep lockstep(threads);
    for (unsigned t = 0; t < threads; ++t) {
      Rng rng(Rng::derive(seed, 1000 + t));
      for (auto& s : sizes[t]) s = static_cast<std::uint32_t>(rng.log_uniform(min_, max_));
      inboxes[t].objects.reserve(1 << 16);
    }
    std::vector<std::uint64_t> ops(threads, 0);
    // The most objects one drain of an inbox found: a thread the scheduler
    // took off its core while the other ran leaves that many live objects
    // beside the slots, whatever the allocator.
    std::vector<std::uint64_t> backlog(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          Rng rng(Rng::derive(seed, t));
          const auto& table = sizes[t];
          auto& mine = slots[t];
          Inbox& in = inboxes[t];
          Inbox& next = inboxes[(t + 1) % threads];
          std::vector<unsigned char*> out, got;
          out.reserve(kBatch);
          got.reserve(1 << 16);
          std::uint64_t i = 0, rounds = 0;
          // Frees what the previous thread handed over.
          auto drain = [&] {
            if (in.size.load(std::memory_order_acquire) == 0) return;
            {
              std::lock_guard lock(in.mutex);
              got.swap(in.objects);
              in.size.store(0, std::memory_order_relaxed);
            }
            if (got.size() > backlog[t]) backlog[t] = got.size();
            free_all(got);
          };
          while (!stop.stopped()) {
            if (lockstep_ && rounds++ % lockstep_ == 0) lockstep.arrive(stop, drain);
            for (std::uint64_t j = 0; j < kDrainEvery; ++j, ++i) {
              const std::uint64_t r = rng.next();
              // Low bits: the slot; bit 32: short- or long-lived; 48-63: cross.
              const std::uint64_t range = (r >> 32) & 1 ? slots_ : slots_ / 16;
              auto& slot = mine[(r & 0xffffffff) % range];
              if (slot) {
                if ((r >> 48) < cross_below) {
                  out.push_back(slot);
                  if (out.size() == kBatch) {
                    // Room for the batch (drain: the next thread may be
                    // waiting for room in this thread's inbox).
                    while (inbox_max_ && next.size.load(std::memory_order_acquire) + kBatch > inbox_max_ &&
                           !stop.stopped()) {
                      drain();
                      std::this_thread::yield();
                    }
                    if (inbox_max_ && next.size.load(std::memory_order_acquire) + kBatch > inbox_max_) {
                      free_all(out);  // stopped with no room: the bound holds to the end
                    } else {
                      std::lock_guard lock(next.mutex);
                      next.objects.insert(next.objects.end(), out.begin(), out.end());
                      next.size.store(next.objects.size(), std::memory_order_release);
                      out.clear();
                    }
                  }
                } else {
                  std::free(slot);
                }
              }
              const std::size_t sz = table[i & (kTable - 1)];
              auto* p = static_cast<unsigned char*>(checked_malloc(sz));
              p[0] = 1;
              p[sz - 1] = 1;
              slot = p;
            }
            drain();
          }
          free_all(out);
          ops[t] = i;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });
    for (auto& in : inboxes) free_all(in.objects);
    for (auto& mine : slots)
      for (auto* p : mine) std::free(p);
    std::uint64_t total = 0, most = 0;
    for (auto n : ops) total += n;
    for (auto n : backlog) most = n > most ? n : most;
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "ops/s", true};
    out.extra = {{"threads", static_cast<double>(threads)}, {"ops", static_cast<double>(total)},
                 {"inbox_peak", static_cast<double>(most)}};
    return out;
  }

 private:
  double seconds_ = 3;
  std::uint64_t threads_ = 2;
  std::uint64_t slots_ = 8192;
  std::uint64_t min_ = 16;
  std::uint64_t max_ = 4096;
  double cross_ = 0.25;
  std::uint64_t lockstep_ = 0;
  std::uint64_t inbox_max_ = 4096;
};

}  // namespace

std::unique_ptr<Workload> make_rptest() { return std::make_unique<Rptest>(); }

}  // namespace lazybench
