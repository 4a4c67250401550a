// xmalloc: producer/consumer across threads (after xmalloc-test in
// mimalloc-bench, which came from Lever and Boreham's "malloc() performance
// in a multithreaded Linux environment").
//
// Producer threads malloc small blocks of random sizes in [--min, --max],
// write to them, and pass them in batches of --batch through a bounded,
// lock-based queue to consumer threads, which check and free them.  Every
// free is therefore of memory another thread allocated, and the allocating
// thread never sees its memory come back: the worst case for per-thread
// caches that do not return remote frees promptly.
//
// Metric: blocks freed by the consumers per second.
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"
#include "harness/rng.h"
#include "workload.h"

namespace lazybench {
namespace {

// A batch header, followed in the same malloc'ed block by `count` pointers.
struct Batch {
  std::size_t count;
};

unsigned char** blocks_of(Batch* b) { return reinterpret_cast<unsigned char**>(b + 1); }

// A bounded FIFO of batches; its storage is allocated before the run.
class BatchQueue {
 public:
  explicit BatchQueue(std::size_t capacity) : ring_(capacity) {}

  // Returns false if the queue was closed while waiting.
  bool push(Batch* b) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [&] { return size_ < ring_.size() || closed_; });
    if (closed_) return false;
    ring_[(head_ + size_) % ring_.size()] = b;
    ++size_;
    not_empty_.notify_one();
    return true;
  }
  // Returns nullptr once the queue is closed and empty.
  Batch* pop() {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return size_ > 0 || closed_; });
    if (size_ == 0) return nullptr;
    Batch* b = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --size_;
    not_full_.notify_one();
    return b;
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::vector<Batch*> ring_;
  std::size_t head_ = 0, size_ = 0;
  bool closed_ = false;
};

void free_batch(Batch* b) {
  unsigned char** blocks = blocks_of(b);
  for (std::size_t i = 0; i < b->count; ++i) {
    if (blocks[i][0] != static_cast<unsigned char>(i)) throw WorkloadError("xmalloc: block content changed");
    std::free(blocks[i]);
  }
  std::free(b);
}

class Xmalloc final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-p,--producers", &producers_, "Producer (malloc) threads");
    o.count("-c,--consumers", &consumers_, "Consumer (free) threads");
    o.count("--batch", &batch_, "Blocks per hand-over");
    o.count("--queue", &queue_, "Batches in flight at most");
    o.size("--min", &min_, "Smallest block");
    o.size("--max", &max_, "Largest block");
  }

  std::string validate() override {
    if (producers_ == 0 || consumers_ == 0) return "need at least one producer and one consumer";
    if (batch_ == 0 || queue_ == 0) return "--batch and --queue must be > 0";
    if (min_ == 0 || min_ > max_) return "need 0 < --min <= --max";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t seed) override {
    const auto producers = static_cast<unsigned>(producers_);
    const auto consumers = static_cast<unsigned>(consumers_);
    BatchQueue queue(queue_);
    std::vector<std::uint64_t> freed(consumers, 0);
    std::atomic<unsigned> producers_left{producers};

    const double elapsed = run_timed_threads(
        producers + consumers, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          if (t < producers) {
            Rng rng(Rng::derive(seed, t));
            try {
              while (!stop.stopped()) {
                auto* b = static_cast<Batch*>(
                    checked_malloc(sizeof(Batch) + batch_ * sizeof(unsigned char*)));
                b->count = batch_;
                unsigned char** blocks = blocks_of(b);
                for (std::size_t i = 0; i < batch_; ++i) {
                  const std::size_t sz = rng.between(min_, max_);
                  blocks[i] = static_cast<unsigned char*>(checked_malloc(sz));
                  blocks[i][sz - 1] = 0;
                  blocks[i][0] = static_cast<unsigned char>(i);
                }
                if (!queue.push(b)) {
                  free_batch(b);
                  break;
                }
              }
            } catch (...) {
              if (producers_left.fetch_sub(1) == 1) queue.close();
              throw;
            }
            if (producers_left.fetch_sub(1) == 1) queue.close();
          } else {
            std::uint64_t local = 0;
            try {
              while (Batch* b = queue.pop()) {
                local += b->count;
                free_batch(b);
              }
            } catch (...) {
              queue.close();
              throw;
            }
            freed[t - producers] = local;
          }
        },
        [&] { measure.begin(); }, [&] { measure.end(); });

    // The queue is closed and drained: every consumer ran until pop() failed.
    std::uint64_t total = 0;
    for (auto n : freed) total += n;
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "blocks/s", true};
    out.extra = {{"producers", static_cast<double>(producers)},
                 {"consumers", static_cast<double>(consumers)},
                 {"blocks", static_cast<double>(total)}};
    return out;
  }

 private:
  double seconds_ = 5;
  std::uint64_t producers_ = 1;
  std::uint64_t consumers_ = 1;
  std::uint64_t batch_ = 256;
  std::uint64_t queue_ = 64;
  std::uint64_t min_ = 8;
  std::uint64_t max_ = 512;
};

}  // namespace

std::unique_ptr<Workload> make_xmalloc() { return std::make_unique<Xmalloc>(); }

}  // namespace lazybench
