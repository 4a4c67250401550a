// ebizzy: the workload of the Linux MADV_FREE discussions.
//
// Modelled on Valerie Henson's ebizzy ("replicate a large ebusiness type of
// workload"): N chunks of sorted fixed-size records are set up once; each
// thread then repeatedly picks a chunk at random, mallocs a buffer of the
// chunk's size, memcpys the chunk into it, searches it for a random key, and
// frees the buffer.  The metric is records searched per second (every record
// of the copied buffer counts, as in ebizzy).
//
// The interesting part for an allocator is the buffer: 512 KiB by default,
// above glibc's initial mmap threshold (128 KiB), so each iteration is one
// large malloc/free.  An allocator that gives those pages back eagerly
// (munmap, MADV_DONTNEED, glibc's heap trimming) pays page faults, zeroing and
// TLB shootdowns on every iteration; one that retains them does not.
//
// Unlike ebizzy 0.3, every thread has its own random stream seeded from the
// run seed and the thread index (ebizzy 0.3 seeded every thread identically
// and in effect always picked chunk 0), and the run seed differs per run.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

class Ebizzy final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-n,--chunks", &chunks_, "Number of memory chunks");
    o.size("-s,--chunk-size", &chunk_size_, "Size of each chunk (and of each copy buffer)");
    o.count("-t,--threads", &threads_, "Worker threads (0 = one per CPU)");
    o.size("-r,--record-size", &record_size_, "Record size (a multiple of 8, >= 8)");
    o.flag("-l,--linear", &linear_, "Linear search instead of binary search");
    o.flag("-R,--random-size", &random_size_, "Copy and search a random-length prefix of the chunk");
  }

  std::string validate() override {
    if (chunks_ == 0) return "--chunks must be > 0";
    if (record_size_ < 8 || record_size_ % 8 != 0) return "--record-size must be a multiple of 8";
    if (chunk_size_ < record_size_) return "--chunk-size must hold at least one record";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    const unsigned threads = threads_ ? static_cast<unsigned>(threads_) : online_cpus();
    const std::size_t records = chunk_size_ / record_size_;
    const std::size_t words = record_size_ / 8;

    // Set up the chunks: random keys, sorted, so a binary search works.
    std::vector<std::uint64_t*> chunks(chunks_);
    Rng setup(Rng::derive(seed, 0xC0FFEE));
    std::vector<std::uint64_t> keys(records);
    for (auto& chunk : chunks) {
      chunk = static_cast<std::uint64_t*>(checked_malloc(records * record_size_));
      for (auto& k : keys) k = setup.next();
      std::sort(keys.begin(), keys.end());
      for (std::size_t r = 0; r < records; ++r) {
        chunk[r * words] = keys[r];
        for (std::size_t w = 1; w < words; ++w) chunk[r * words + w] = keys[r] ^ w;
      }
    }

    std::vector<std::uint64_t> searched(threads, 0), iterations(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          Rng rng(Rng::derive(seed, t));
          std::uint64_t local_records = 0, local_iters = 0;
          while (!stop.stopped()) {
            const std::uint64_t* chunk = chunks[rng.below(chunks_)];
            const std::size_t n = random_size_ ? 1 + rng.below(records) : records;
            const std::size_t bytes = n * record_size_;
            auto* copy = static_cast<std::uint64_t*>(checked_malloc(bytes));
            std::memcpy(copy, chunk, bytes);
            const std::uint64_t key = chunk[rng.below(n) * words];
            if (!find(copy, n, words, key))
              throw WorkloadError("ebizzy: key not found in copied chunk (memory corrupted?)");
            escape(copy);
            std::free(copy);
            local_records += n;
            ++local_iters;
          }
          searched[t] = local_records;
          iterations[t] = local_iters;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });

    for (auto* chunk : chunks) std::free(chunk);
    std::uint64_t total_records = 0, total_iters = 0;
    for (unsigned t = 0; t < threads; ++t) {
      total_records += searched[t];
      total_iters += iterations[t];
    }
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total_records) / elapsed, "records/s", true};
    out.extra = {{"threads", static_cast<double>(threads)},
                 {"chunk_kib", static_cast<double>(chunk_size_) / 1024.0},
                 {"chunks", static_cast<double>(chunks_)},
                 {"iterations", static_cast<double>(total_iters)},
                 {"copies_per_s", static_cast<double>(total_iters) / elapsed}};
    return out;
  }

 private:
  bool find(const std::uint64_t* copy, std::size_t n, std::size_t words, std::uint64_t key) const {
    if (linear_) {
      for (std::size_t r = 0; r < n; ++r)
        if (copy[r * words] == key) return true;
      return false;
    }
    std::size_t lo = 0, hi = n;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      const std::uint64_t v = copy[mid * words];
      if (v == key) return true;
      if (v < key) lo = mid + 1;
      else hi = mid;
    }
    return false;
  }

  double seconds_ = 10;  // ebizzy's default
  std::uint64_t chunks_ = 10;                  // ebizzy's default
  std::uint64_t chunk_size_ = 512 * 1024;      // ebizzy's default, > glibc's 128 KiB mmap threshold
  std::uint64_t threads_ = 0;
  std::uint64_t record_size_ = 16;             // ebizzy's default
  bool linear_ = false;
  bool random_size_ = false;
};

}  // namespace

std::unique_ptr<Workload> make_ebizzy() { return std::make_unique<Ebizzy>(); }

}  // namespace lazybench
