// Small helpers shared by the stand-alone measurement tools (purge-latency,
// release-scaling): a monotonic clock and "64M"-style size arguments.
#pragma once

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace bench_tool {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// "1.5G", "64M", "4k" or a plain number of bytes.
inline size_t parse_size(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
  }
  return size_t(v);
}

}  // namespace bench_tool
