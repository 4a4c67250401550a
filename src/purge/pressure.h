// Memory pressure and limits: where "the machine needs memory" comes from.
//
// Sources, each optional and each degrading to "absent" when its file or
// permission is missing (the statistics say which are active):
//   psi      the process's cgroup v2 memory.pressure, else /proc/pressure/memory:
//            tasks stalled on memory ("some") for 7.5% or more of the time since
//            the last look (the "total" stall counter).  No
//            descriptor stays open: a PSI trigger would need one for good, and
//            programs that list or close their descriptors (daemons, CPython's
//            subprocess tests) would find it.
//   cgroup   v2 memory.max / memory.high / memory.current, or v1
//            memory.limit_in_bytes / memory.usage_in_bytes: usage above 90%
//            of the limit asks for usage down to 85%.
//   meminfo  MemAvailable below 1/32 of MemTotal asks for it back up to 1/16.
//   limit    LAZYMALLOC_MEMORY_LIMIT: allocator-held memory (active + retained
//            + lazy) above the soft limit asks for the excess.
// The monitor only measures; the Purger turns a request into purges.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/stats.h"
#include "pal/pal.h"

namespace lazymalloc {

enum class PressureSource : uint8_t { kNone, kPsi, kCgroup, kMeminfo, kLimit, kApi };

struct PressureRequest {
  PressureSource source = PressureSource::kNone;
  uint64_t bytes = 0;  // how much to give back; ~0 = everything free
};

class PressureMonitor {
 public:
  constexpr PressureMonitor() = default;

  // Finds the sources.  Reads /proc/self/cgroup and the cgroup files.
  void init(const Platform* platform, Stats* stats, bool watch);

  // What should be released now, given that the allocator holds `footprint`
  // bytes (active+retained+lazy).  Reads the PSI, cgroup and meminfo files
  // (the purger calls it every pressure_interval_ms or less often, see
  // Purger::pressure_interval_ns).
  // `files` false: the soft limit only (no file is read).
  PressureRequest check(uint64_t now_ns, uint64_t footprint, uint64_t soft_limit, bool files = true);
  // True when the process lives in a cgroup with a memory limit, where lazily
  // freed pages still count against the limit until reclaimed.
  // (Read by any thread that purges; written by the background thread.)
  bool cgroup_limited() const { return cgroup_limit() != 0; }
  uint64_t cgroup_limit() const { return cgroup_limit_.load(std::memory_order_relaxed); }


 private:
  uint64_t read_u64(const char* path, bool* ok);
  // Reads the PSI file; sets psi_stalled_ from the stall time since the last
  // read.  false if the file is missing or malformed.
  bool read_psi(uint64_t now);
  void read_cgroup_limit();

  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
  bool watch_ = false;
  char psi_path_[320] = {};   // empty: no PSI source
  uint64_t psi_total_us_ = 0;  // "some ... total=" at the last look
  uint64_t psi_ns_ = 0;
  bool psi_stalled_ = false;
  int cgroup_version_ = 0;  // 0 none, 1, 2
  char cgroup_dir_[256] = {};
  std::atomic<uint64_t> cgroup_limit_{0};
  bool meminfo_ = false;
};

// Parsers, exposed for tests.
// The cgroup path of the memory controller from /proc/self/cgroup contents:
// version 2 ("0::/path") or 1 (":memory:" line); returns 0 if none.
int parse_proc_cgroup(const char* text, char* path, size_t len);
// A cgroup limit file: a number, or "max" (returns 0 = unlimited).
uint64_t parse_limit(const char* text);
// The "total=" stall time (us) of the "some" line of a PSI file; false if absent.
bool parse_psi_some_total(const char* text, uint64_t* total_us);
// Threads still running, from /proc/self/status ("Threads:", less a leader
// that is a zombie, "State: Z"); false if absent.
bool parse_status_live_threads(const char* text, uint64_t* live);
// "Key:   123 kB" from /proc/meminfo, in bytes; false if absent.
bool parse_meminfo(const char* text, const char* key, uint64_t* bytes);

}  // namespace lazymalloc
