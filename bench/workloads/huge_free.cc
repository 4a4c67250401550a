// huge-free: how long does free() of a huge block take, and how long until
// the memory has really left the process?
//
// Allocates one --size block (2 GiB by default), writes every page, then
// times the free() call itself.  After that it polls /proc/self/smaps_rollup
// every --poll until Rss - LazyFree ("held") has dropped to within
// --threshold of what the process held before the allocation, or --timeout
// passes.  munmap of a big touched region takes long (tens to hundreds of ms
// with 4 KiB pages), and an allocator that does it inside free() stalls the
// caller; one that defers it must still give the memory back soon.
//
// Metric: free() latency in ms (lower is better).  Extra: release_ms, the
// time from the start of free() until the memory had left (-1 if it did not
// within --timeout), and held/Rss/LazyFree at the end.
#include <cstring>

#include "common.h"
#include "workload.h"

namespace lazybench {
namespace {

double mib(std::int64_t kib) { return static_cast<double>(kib) / 1024.0; }

class HugeFree final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.size("--size", &size_, "Block size");
    o.size("--threshold", &threshold_, "Released when held memory is within this of the baseline (0 = size/10)");
    o.seconds("--timeout", &timeout_s_, "Give up waiting for the release after this long");
    o.seconds("--poll", &poll_s_, "Interval between smaps_rollup polls");
  }

  std::string validate() override {
    if (size_ < kPageSize) return "--size must be at least one page";
    if (poll_s_ <= 0) return "--poll must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t /*seed*/) override {
    const std::int64_t threshold_kib =
        static_cast<std::int64_t>((threshold_ ? threshold_ : size_ / 10) / 1024);
    const auto baseline = read_mem_sample().value_or(MemSample{});
    const auto t_alloc = Clock::now();
    void* p = checked_malloc(size_);
    touch_pages(p, size_);
    const double touch_s = seconds_since(t_alloc);
    const auto before = read_mem_sample().value_or(MemSample{});

    measure.begin();
    const auto t_free = Clock::now();
    std::free(p);
    const double free_ms = seconds_since(t_free) * 1000.0;
    const auto just_after = read_mem_sample().value_or(MemSample{});
    double release_ms = -1;
    MemSample last = just_after;
    while (true) {
      if (last.held_kib() <= baseline.held_kib() + threshold_kib) {
        release_ms = seconds_since(t_free) * 1000.0;
        break;
      }
      if (seconds_since(t_free) >= timeout_s_) break;
      sleep_seconds(poll_s_);
      last = read_mem_sample().value_or(last);
    }
    measure.end();

    Outcome out;
    out.metric = {"free_latency", free_ms, "ms", false};
    out.extra = {{"size_mib", static_cast<double>(size_) / 1048576.0},
                 {"touch_s", touch_s},
                 {"release_ms", release_ms},
                 {"baseline_held_mib", mib(baseline.held_kib())},
                 {"held_before_free_mib", mib(before.held_kib())},
                 {"anonhuge_before_free_mib", mib(before.anonhuge_kib)},
                 {"held_after_free_mib", mib(just_after.held_kib())},
                 {"rss_mib", mib(last.rss_kib)},
                 {"lazyfree_mib", mib(last.lazyfree_kib)},
                 {"held_mib", mib(last.held_kib())}};
    return out;
  }

 private:
  std::uint64_t size_ = 2ull << 30;
  std::uint64_t threshold_ = 0;
  double timeout_s_ = 10;
  double poll_s_ = 0.002;
};

}  // namespace

std::unique_ptr<Workload> make_huge_free() { return std::make_unique<HugeFree>(); }

}  // namespace lazybench
