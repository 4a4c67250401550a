// phases: a program that works in bursts and then goes idle.
//
// Each phase allocates a working set of mixed sizes (log-uniform between
// --min and --max, --total bytes in all), touches every page, frees every
// block in random order, and sleeps --gap.  After the last phase the program
// idles for --idle.  A sampler thread reads /proc/self/smaps_rollup every
// --sample (Rss, LazyFree, AnonHugePages) for the whole run.
//
// Metric: the median phase time (lower is better) -- how quickly memory that
// was just freed can be reused.  The held-memory figures tell the other half
// of the story: Rss - LazyFree ("held": memory the rest of the system cannot
// have) right after the last free and at the end of the idle period.  A
// hoarding allocator wins on phase time and loses on held memory; an eager
// one the other way round.  --series FILE writes the samples as a table for
// plotting (`lazybench compare` draws phases-memory.svg from it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "harness/stats.h"
#include "workload.h"

namespace lazybench {
namespace {

struct Sample {
  double t_s;
  int phase;  // phase index while working, -1 in gaps and idle
  MemSample mem;
};

// Samples memory on its own thread into a buffer sized up front, so sampling
// does not allocate while the workload runs.
class Sampler {
 public:
  Sampler(double interval_s, std::size_t capacity) : interval_s_(interval_s) { samples_.reserve(capacity); }
  ~Sampler() { stop(); }

  void start(Clock::time_point t0, const std::atomic<int>* phase) {
    t0_ = t0;
    phase_ = phase;
    thread_ = std::thread([this] { loop(); });
  }
  void stop() {
    if (!thread_.joinable()) return;
    stop_.stop();
    thread_.join();
  }
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  void loop() {
    auto next = Clock::now();
    while (!stop_.stopped()) {
      take();
      next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s_));
      // Sleep in slices of at most 20 ms so stop() is prompt.
      while (!stop_.stopped() && Clock::now() < next)
        std::this_thread::sleep_for(std::min<Clock::duration>(next - Clock::now(), std::chrono::milliseconds(20)));
    }
    take();
  }
  void take() {
    if (samples_.size() == samples_.capacity()) return;  // never reallocate
    const auto mem = read_mem_sample();
    if (!mem) return;
    samples_.push_back({seconds_since(t0_), phase_->load(std::memory_order_relaxed), *mem});
  }

  double interval_s_;
  Clock::time_point t0_{};
  const std::atomic<int>* phase_ = nullptr;
  StopFlag stop_;
  std::thread thread_;
  std::vector<Sample> samples_;
};

double mib(std::int64_t kib) { return static_cast<double>(kib) / 1024.0; }

class Phases final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.count("-p,--phases", &phases_, "Number of phases");
    o.size("--total", &total_, "Bytes allocated (and touched) per phase");
    o.size("--min", &min_, "Smallest block");
    o.size("--max", &max_, "Largest block");
    o.seconds("--gap", &gap_s_, "Sleep between phases");
    o.seconds("--idle", &idle_s_, "Idle time after the last phase");
    o.seconds("--sample", &sample_s_, "Interval between smaps_rollup samples");
    o.text("--series", &series_, "Write the memory samples to this file (TSV)");
  }

  std::string validate() override {
    if (phases_ == 0) return "--phases must be > 0";
    if (min_ == 0 || min_ > max_) return "need 0 < --min <= --max";
    if (total_ < min_) return "--total must be >= --min";
    if (sample_s_ <= 0) return "--sample must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    // Plan every phase up front: block sizes and free order.
    Rng rng(Rng::derive(seed, 1));
    const double lmin = std::log(static_cast<double>(min_)), lmax = std::log(static_cast<double>(max_));
    std::vector<std::vector<std::size_t>> sizes(phases_), order(phases_);
    std::size_t max_blocks = 0;
    for (std::uint64_t p = 0; p < phases_; ++p) {
      std::uint64_t sum = 0;
      while (sum < total_) {
        auto sz = static_cast<std::uint64_t>(std::exp(lmin + (lmax - lmin) * rng.uniform()));
        sz = std::clamp<std::uint64_t>(sz, min_, max_);
        sz = std::min(sz, std::max<std::uint64_t>(total_ - sum, min_));
        sizes[p].push_back(sz);
        sum += sz;
      }
      order[p].resize(sizes[p].size());
      for (std::size_t i = 0; i < order[p].size(); ++i) order[p][i] = i;
      for (std::size_t i = order[p].size(); i > 1; --i) std::swap(order[p][i - 1], order[p][rng.below(i)]);
      max_blocks = std::max(max_blocks, sizes[p].size());
    }
    std::vector<void*> blocks(max_blocks, nullptr);
    std::vector<double> phase_ms(phases_, 0);

    const double expected_s = static_cast<double>(phases_) * (gap_s_ + 2.0) + idle_s_ + 10;
    Sampler sampler(sample_s_, static_cast<std::size_t>(expected_s / sample_s_) + 1024);
    std::atomic<int> current_phase{-1};
    const auto baseline = read_mem_sample().value_or(MemSample{});
    MemSample after_last_free{};

    const auto t0 = Clock::now();
    sampler.start(t0, &current_phase);
    measure.begin();
    for (std::uint64_t p = 0; p < phases_; ++p) {
      current_phase.store(static_cast<int>(p), std::memory_order_relaxed);
      const auto start = Clock::now();
      const auto& sz = sizes[p];
      for (std::size_t i = 0; i < sz.size(); ++i) {
        blocks[i] = checked_malloc(sz[i]);
        touch_pages(blocks[i], sz[i], static_cast<unsigned char>(p + 1));
      }
      for (std::size_t i : order[p]) {
        if (*static_cast<volatile unsigned char*>(blocks[i]) != static_cast<unsigned char>(p + 1))
          throw WorkloadError("phases: block content changed while allocated");
        std::free(blocks[i]);
      }
      phase_ms[p] = seconds_since(start) * 1000.0;
      current_phase.store(-1, std::memory_order_relaxed);
      if (p + 1 == phases_) after_last_free = read_mem_sample().value_or(MemSample{});
      sleep_seconds(gap_s_);
    }
    sleep_seconds(idle_s_);
    const auto end = read_mem_sample().value_or(MemSample{});
    measure.end();
    sampler.stop();

    std::int64_t peak_held = 0;
    for (const auto& s : sampler.samples()) peak_held = std::max(peak_held, s.mem.held_kib());
    if (!series_.empty()) write_series(sampler.samples());

    Outcome out;
    out.metric = {"phase_time", median(phase_ms), "ms", false};
    out.extra = {
        {"phases", static_cast<double>(phases_)},
        {"phase_mib", static_cast<double>(total_) / (1024.0 * 1024.0)},
        {"first_phase_ms", phase_ms.front()},
        {"max_phase_ms", *std::max_element(phase_ms.begin(), phase_ms.end())},
        {"all_phases_ms", std::accumulate(phase_ms.begin(), phase_ms.end(), 0.0)},
        {"baseline_held_mib", mib(baseline.held_kib())},
        {"held_after_free_mib", mib(after_last_free.held_kib())},
        {"peak_held_mib", mib(peak_held)},
        {"rss_mib", mib(end.rss_kib)},
        {"lazyfree_mib", mib(end.lazyfree_kib)},
        {"anonhuge_mib", mib(end.anonhuge_kib)},
        {"held_mib", mib(end.held_kib())},
        {"samples", static_cast<double>(sampler.samples().size())},
    };
    return out;
  }

 private:
  void write_series(const std::vector<Sample>& samples) const {
    std::FILE* f = std::fopen(series_.c_str(), "w");
    if (!f) throw WorkloadError("phases: cannot write --series file " + series_);
    std::fprintf(f, "# t_s\tphase\trss_mib\tlazyfree_mib\theld_mib\tanonhuge_mib\n");
    for (const auto& s : samples)
      std::fprintf(f, "%.3f\t%d\t%.2f\t%.2f\t%.2f\t%.2f\n", s.t_s, s.phase, mib(s.mem.rss_kib),
                   mib(s.mem.lazyfree_kib), mib(s.mem.held_kib()), mib(s.mem.anonhuge_kib));
    if (std::fclose(f) != 0) throw WorkloadError("phases: error writing " + series_);
  }

  std::uint64_t phases_ = 8;
  std::uint64_t total_ = 512ull << 20;
  std::uint64_t min_ = 16 << 10;
  std::uint64_t max_ = 2 << 20;
  double gap_s_ = 0.2;
  double idle_s_ = 12;
  double sample_s_ = 0.05;
  std::string series_;
};

}  // namespace

std::unique_ptr<Workload> make_phases() { return std::make_unique<Phases>(); }

}  // namespace lazybench
