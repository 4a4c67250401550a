// Memory pressure and limits: where "the machine needs memory" comes from.
//
// Sources, each optional and each degrading to "absent" when its file or
// permission is missing (the statistics say which are active):
//   psi      a PSI trigger on the process's cgroup v2 memory.pressure, else on
//            /proc/pressure/memory: "some 150ms stalled in a 2 s window"; the
//            background thread polls it, so an event wakes it at once.
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

  // What should be released now, given that the PSI handle fired (or not)
  // and that the allocator holds `footprint` bytes (active+retained+lazy).
  // Reads the cgroup and meminfo files at most every 250 ms.
  PressureRequest check(uint64_t now_ns, bool psi_fired, uint64_t footprint, uint64_t soft_limit);

  int psi_handle() const { return psi_; }
  // True when the process lives in a cgroup with a memory limit, where lazily
  // freed pages still count against the limit until reclaimed.
  // (Read by any thread that purges; written by the background thread.)
  bool cgroup_limited() const { return cgroup_limit() != 0; }
  uint64_t cgroup_limit() const { return cgroup_limit_.load(std::memory_order_relaxed); }

  void fork_child() { psi_ = -1; }  // the trigger belongs to the parent's fd table too, but
                                    // the child's background thread re-inits lazily

 private:
  uint64_t read_u64(const char* path, bool* ok);
  void read_cgroup_limit();

  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
  bool watch_ = false;
  int psi_ = -1;
  int cgroup_version_ = 0;  // 0 none, 1, 2
  char cgroup_dir_[256] = {};
  std::atomic<uint64_t> cgroup_limit_{0};
  bool meminfo_ = false;
  uint64_t last_files_ns_ = 0;
};

// Parsers, exposed for tests.
// The cgroup path of the memory controller from /proc/self/cgroup contents:
// version 2 ("0::/path") or 1 (":memory:" line); returns 0 if none.
int parse_proc_cgroup(const char* text, char* path, size_t len);
// A cgroup limit file: a number, or "max" (returns 0 = unlimited).
uint64_t parse_limit(const char* text);
// "Key:   123 kB" from /proc/meminfo, in bytes; false if absent.
bool parse_meminfo(const char* text, const char* key, uint64_t* bytes);

}  // namespace lazymalloc
