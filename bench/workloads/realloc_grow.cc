// realloc-grow: buffers that grow by realloc, like a string or vector being
// appended to.
//
// Each thread repeatedly takes a buffer from --start bytes up to --max bytes
// (4 MiB by default), growing it by --growth each step with realloc and
// writing the new bytes, then frees it.  Small steps stay in size classes,
// larger ones cross into the large-object path, where an allocator can grow
// in place (mremap, or adjacent free space) or must copy.  Each step checks
// that the old contents survived the move.
//
// Metric: realloc calls per second over all threads.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common.h"
#include "workload.h"

namespace lazybench {
namespace {

class ReallocGrow final : public Workload {
 public:
  void options(OptionSink& o) override {
    o.seconds("-S,--seconds", &seconds_, "Run time");
    o.count("-t,--threads", &threads_, "Threads");
    o.size("--start", &start_, "Initial size (malloc)");
    o.size("--max", &max_, "Final size");
    o.real("--growth", &growth_, "Growth factor per realloc (> 1)");
  }

  std::string validate() override {
    if (threads_ == 0) return "--threads must be > 0";
    if (start_ == 0 || start_ > max_) return "need 0 < --start <= --max";
    if (!(growth_ > 1.0)) return "--growth must be > 1";
    if (seconds_ <= 0) return "--seconds must be > 0";
    return {};
  }

  Outcome run(Measure& measure, std::uint64_t /*seed*/) override {
    const auto threads = static_cast<unsigned>(threads_);
    std::vector<std::uint64_t> reallocs(threads, 0), buffers(threads, 0);
    const double elapsed = run_timed_threads(
        threads, seconds_,
        [&](unsigned t, const StopFlag& stop) {
          std::uint64_t local_reallocs = 0, local_buffers = 0;
          while (!stop.stopped()) {
            std::size_t size = start_;
            auto* p = static_cast<unsigned char*>(checked_malloc(size));
            std::memset(p, 0xA5, size);
            while (size < max_) {
              const std::size_t next = std::min<std::size_t>(
                  max_, std::max<std::size_t>(size + 16, static_cast<std::size_t>(static_cast<double>(size) * growth_)));
              auto* q = static_cast<unsigned char*>(std::realloc(p, next));
              if (!q) {
                std::free(p);
                throw WorkloadError("realloc(" + std::to_string(next) + ") returned NULL");
              }
              if (q[0] != 0xA5 || q[size - 1] != 0xA5) throw WorkloadError("realloc-grow: contents lost in realloc");
              std::memset(q + size, 0xA5, next - size);
              p = q;
              size = next;
              ++local_reallocs;
            }
            escape(p);
            std::free(p);
            ++local_buffers;
          }
          reallocs[t] = local_reallocs;
          buffers[t] = local_buffers;
        },
        [&] { measure.begin(); }, [&] { measure.end(); });
    std::uint64_t total = 0, total_buffers = 0;
    for (unsigned t = 0; t < threads; ++t) {
      total += reallocs[t];
      total_buffers += buffers[t];
    }
    Outcome out;
    out.metric = {"throughput", static_cast<double>(total) / elapsed, "reallocs/s", true};
    out.extra = {{"threads", static_cast<double>(threads)},
                 {"buffers", static_cast<double>(total_buffers)},
                 {"buffers_per_s", static_cast<double>(total_buffers) / elapsed}};
    return out;
  }

 private:
  double seconds_ = 3;
  std::uint64_t threads_ = 1;
  std::uint64_t start_ = 16;
  std::uint64_t max_ = 4 << 20;
  double growth_ = 1.5;
};

}  // namespace

std::unique_ptr<Workload> make_realloc_grow() { return std::make_unique<ReallocGrow>(); }

}  // namespace lazybench
