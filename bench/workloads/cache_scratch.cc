// cache-scratch: passive false sharing (after Hoard's cache-scratch, as in
// mimalloc-bench).
//
// The main thread allocates one small object (--size bytes) per worker, one
// after the other, so they are likely to share a cache line, and hands one
// to each worker.  Each worker frees the object it was given, then, in a
// loop, allocates an object of the same size, writes every byte of it
// --writes times and frees it.  An allocator that gives a worker memory on a
// cache line another thread writes (for example by reusing the object the
// main thread handed over for the worker's own allocations) makes the
// workers' writes bounce that line between the cores: the loop slows down
// by an order of magnitude.  An allocator that serves each thread from its
// own memory keeps the lines apart.
//
// Metric: objects allocated, written and freed per second over all workers.
#include <vector>

#include "common.h"
#include "workload.h"

namespace lazybench {
namespace {

class CacheScratch final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Worker threads");
    o.size("--size", &size_, "Object size");
    o.count("--writes", &writes_, "Writes of every byte of an object before it is freed");
  }

  std::string validate() override {
    if (threads_ == 0) return "--threads must be > 0";
    if (size_ == 0) return "--size must be > 0";
    if (writes_ == 0) return "--writes must be > 0";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t) override {
    const auto threads = static_cast<unsigned>(threads_);
    const std::size_t size = size_;
    // Allocated together by this (the main) thread, handed over to the workers.
    std::vector<unsigned char*> given(threads);
    for (auto& p : given) {
      p = static_cast<unsigned char*>(checked_malloc(size));
      p[0] = 1;
    }
    std::vector<std::uint64_t> objects(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          std::free(given[t]);
          std::uint64_t n = 0;
          while (!stop.stopped()) {
            auto* p = static_cast<volatile unsigned char*>(checked_malloc(size));
            for (std::uint64_t w = 0; w < writes_; ++w)
              for (std::size_t k = 0; k < size; ++k) {
                p[k] = static_cast<unsigned char>(k + w);
                unsigned char v = p[k];
                escape(&v);
              }
            std::free(const_cast<unsigned char*>(p));
            ++n;
          }
          objects[t] = n;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });
    std::uint64_t total = 0;
    for (auto n : objects) total += n;
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "objects/s", true};
    out.extra = {{"threads", static_cast<double>(threads)}, {"objects", static_cast<double>(total)}};
    return out;
  }

 private:
  double seconds_ = 3;
  std::uint64_t threads_ = 2;
  std::uint64_t size_ = 8;
  std::uint64_t writes_ = 10000;
};

}  // namespace

std::unique_ptr<Workload> make_cache_scratch() { return std::make_unique<CacheScratch>(); }

}  // namespace lazybench
