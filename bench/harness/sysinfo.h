// What the harness reads from the operating system: CPU time and faults
// (getrusage), resident memory (/proc/self/smaps_rollup), and a description
// of the machine for the reports.
//
// The smaps reader allocates nothing (stack buffer, plain read(2)), so the
// phases sampler thread does not disturb the allocator it is measuring.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

namespace lazybench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A getrusage(RUSAGE_SELF) snapshot.
struct Usage {
  double user_s = 0;
  double sys_s = 0;
  std::int64_t minflt = 0;
  std::int64_t majflt = 0;
  std::int64_t nvcsw = 0;
  std::int64_t nivcsw = 0;
  std::int64_t maxrss_kib = 0;  // peak, not a delta

  static Usage self();
  // Counters of `later` minus those of `earlier`; maxrss_kib is later's.
  static Usage delta(const Usage& earlier, const Usage& later);
};

// The fields of /proc/self/smaps_rollup that describe held memory, in KiB.
// LazyFree is memory given to the kernel with MADV_FREE that is still mapped
// and counted in Rss until the kernel reclaims it; "held" = Rss - LazyFree
// is what the process really keeps from the rest of the system.
struct MemSample {
  std::int64_t rss_kib = 0;
  std::int64_t lazyfree_kib = 0;
  std::int64_t anonhuge_kib = 0;
  std::int64_t held_kib() const { return rss_kib - lazyfree_kib; }
};

// Parses smaps_rollup text.  nullopt when there is no "Rss:" line.
std::optional<MemSample> parse_smaps_rollup(std::string_view text);

// Reads /proc/self/smaps_rollup (falls back to /proc/self/status VmRSS with
// LazyFree 0 on kernels without smaps_rollup).  Allocation-free.
std::optional<MemSample> read_mem_sample();

// Parses a "Key:   123 kB" style line from a proc file; nullopt if absent.
std::optional<std::int64_t> proc_field_kib(std::string_view text, std::string_view key);

// One-line description: "2 CPUs (Intel Xeon ...), 23.5 GiB RAM, Linux
// 6.18.44 x86_64, THP madvise", and where the machine is a guest that
// reports its free memory to the host (page_reporting_kib), ", free page
// reporting to the host (blocks of 2 MiB)".
std::string machine_description();

// Free page reporting (virtio-balloon feature bit 5, VIRTIO_BALLOON_F_REPORTING):
// the guest tells the host which free blocks of 2^order pages it has, and the
// host drops their backing, so the next touch of such a block faults on the
// host as well.  A transparent hugepage needs a whole free 2 MiB block, which
// is most often such a one: on the 2-core VMs of docs/benchmarks.md a hugepage
// fault then costs 4-5 ms against about 0.3 ms for a block the host still
// backs.  `features`: the device's sysfs features string ('0'/'1' per bit,
// bit 0 first); `order`: page_reporting_order's text ("" if unknown).  The
// size of the reported blocks in KiB (order 9 if unknown), or 0 when the
// feature is off.
std::uint64_t page_reporting_kib(std::string_view features, std::string_view order);

// The first three fields of /proc/loadavg ("1.02 0.87 0.60"): system-wide,
// so it shows other work competing with a benchmark for the CPUs.
std::string load_average();

// Number of CPUs this process may run on.
unsigned online_cpus();

// The CPUs this thread may run on (its affinity), ascending; empty if
// unknown.
std::vector<int> usable_cpus();

// `uname -r`.
std::string kernel_release();

// Current local time as "2025-11-29 22:31:00 +0000".
std::string local_timestamp();

// Absolute path of the running executable (/proc/self/exe).
std::string self_exe();

// A fresh seed from the kernel (getrandom), mixed with the time.
std::uint64_t fresh_seed();

// Which malloc the process is actually using, judged by symbols only a
// particular allocator exports: "lazymalloc", "jemalloc", "tcmalloc",
// "mimalloc", "tbbmalloc", or "glibc".
std::string detect_allocator();

}  // namespace lazybench
