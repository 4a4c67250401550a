#include "purge/pressure.h"

#include "core/format.h"

namespace lazymalloc {

namespace {

// ---- thresholds (docs/design.md, "Pressure and limits")

// PSI: memory stall time over elapsed time between two checks, in per mille,
// at or above which the system is under pressure: 75 = 7.5%, the 150 ms in
// 2 s of the usual PSI trigger (a userspace OOM killer's first level).
constexpr uint64_t kPsiStallPerMille = 75;

// A fraction of a limit, computed as `limit / den * num` (no overflow for any
// 64-bit limit; the rounding is below a page for any real limit).
struct Share {
  uint64_t num, den;
  uint64_t of(uint64_t limit) const { return limit / den * num; }
};
// cgroup: usage over 90% of the cgroup's limit (memory.max or memory.high,
// or v1's limit_in_bytes) is pressure, and relief aims at 85%: a 5% band,
// so that one relief is not followed by the next at the following check,
// and well below the kernel's own reclaim at the limit.
constexpr Share kCgroupTrigger{9, 10};
constexpr Share kCgroupTarget{17, 20};
// The system (/proc/meminfo): less than 1/32 of MemTotal available is
// pressure (about where the kernel starts direct reclaim on a machine of a
// few GiB), and relief aims at 1/16 available: twice the trigger.
constexpr uint64_t kMeminfoTriggerDiv = 32;
constexpr uint64_t kMeminfoTargetDiv = 16;
// cgroup v1 reports "no limit" as a number near 2^63 (page-rounded
// LONG_MAX); anything from 2^60 (1 EiB) on is taken as none.
constexpr uint64_t kNoLimitFrom = uint64_t(1) << 60;

bool starts_with(const char* s, const char* prefix) {
  while (*prefix) {
    if (*s++ != *prefix++) return false;
  }
  return true;
}

// Copies a line's tail (up to newline) into out.
void copy_line(const char* from, char* out, size_t len) {
  size_t i = 0;
  while (from[i] && from[i] != '\n' && i + 1 < len) {
    out[i] = from[i];
    ++i;
  }
  out[i] = '\0';
}

uint64_t parse_u64(const char* s, bool* ok) {
  while (*s == ' ' || *s == '\t') ++s;
  if (*s < '0' || *s > '9') {
    *ok = false;
    return 0;
  }
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + uint64_t(*s++ - '0');
  *ok = true;
  return v;
}

}  // namespace

int parse_proc_cgroup(const char* text, char* path, size_t len) {
  int version = 0;
  for (const char* line = text; line && *line;) {
    if (starts_with(line, "0::")) {
      if (version == 0) {
        copy_line(line + 3, path, len);
        version = 2;
      }
    } else {
      // "N:controllers:/path" with "memory" among the controllers.
      const char* c = line;
      while (*c && *c != ':' && *c != '\n') ++c;
      if (*c == ':') {
        const char* ctl = c + 1;
        const char* end = ctl;
        while (*end && *end != ':' && *end != '\n') ++end;
        for (const char* w = ctl; w < end;) {
          const char* we = w;
          while (we < end && *we != ',') ++we;
          if (we - w == 6 && starts_with(w, "memory") && *end == ':') {
            copy_line(end + 1, path, len);
            return 1;  // v1 memory controller wins over the v2 line
          }
          w = we + 1;
        }
      }
    }
    const char* nl = line;
    while (*nl && *nl != '\n') ++nl;
    line = *nl ? nl + 1 : nullptr;
  }
  return version;
}

uint64_t parse_limit(const char* text) {
  if (starts_with(text, "max")) return 0;
  bool ok;
  uint64_t v = parse_u64(text, &ok);
  if (!ok || v >= kNoLimitFrom) return 0;
  return v;
}

bool parse_psi_some_total(const char* text, uint64_t* total_us) {
  for (const char* line = text; line && *line;) {
    if (starts_with(line, "some ")) {
      for (const char* c = line; *c && *c != '\n'; ++c) {
        if (starts_with(c, "total=")) {
          bool ok;
          *total_us = parse_u64(c + 6, &ok);
          return ok;
        }
      }
      return false;
    }
    const char* nl = line;
    while (*nl && *nl != '\n') ++nl;
    line = *nl ? nl + 1 : nullptr;
  }
  return false;
}

bool parse_status_live_threads(const char* text, uint64_t* live) {
  bool zombie_leader = false, found = false;
  uint64_t threads = 0;
  for (const char* line = text; line && *line;) {
    if (starts_with(line, "State:")) {
      const char* c = line + 6;
      while (*c == ' ' || *c == '\t') ++c;
      zombie_leader = *c == 'Z';
    } else if (starts_with(line, "Threads:")) {
      threads = parse_u64(line + 8, &found);
    }
    const char* nl = line;
    while (*nl && *nl != '\n') ++nl;
    line = *nl ? nl + 1 : nullptr;
  }
  if (!found) return false;
  // A leader that ended with pthread_exit() stays a zombie, still counted,
  // until the whole process ends.
  *live = zombie_leader && threads ? threads - 1 : threads;
  return true;
}

bool parse_meminfo(const char* text, const char* key, uint64_t* bytes) {
  for (const char* line = text; line && *line;) {
    if (starts_with(line, key) && line[0] && [&] {
          size_t n = 0;
          while (key[n]) ++n;
          return line[n] == ':';
        }()) {
      const char* v = line;
      while (*v && *v != ':') ++v;
      bool ok;
      uint64_t kb = parse_u64(v + 1, &ok);
      if (!ok) return false;
      *bytes = kb * 1024;
      return true;
    }
    const char* nl = line;
    while (*nl && *nl != '\n') ++nl;
    line = *nl ? nl + 1 : nullptr;
  }
  return false;
}

uint64_t PressureMonitor::read_u64(const char* path, bool* ok) {
  char buf[64];
  if (platform_->read_file(platform_->ctx, path, buf, sizeof buf) <= 0) {
    *ok = false;
    return 0;
  }
  *ok = true;
  return parse_limit(buf);
}

void PressureMonitor::read_cgroup_limit() {
  char path[320];
  bool ok1 = false, ok2 = false;
  uint64_t limit = 0;
  if (cgroup_version_ == 2) {
    Writer w(path, sizeof path);
    w.put(cgroup_dir_);
    w.put("/memory.max");
    w.finish();
    uint64_t max = read_u64(path, &ok1);
    Writer h(path, sizeof path);
    h.put(cgroup_dir_);
    h.put("/memory.high");
    h.finish();
    uint64_t high = read_u64(path, &ok2);
    limit = max;
    if (high && (!limit || high < limit)) limit = high;
  } else if (cgroup_version_ == 1) {
    Writer w(path, sizeof path);
    w.put(cgroup_dir_);
    w.put("/memory.limit_in_bytes");
    w.finish();
    limit = read_u64(path, &ok1);
  }
  cgroup_limit_.store(limit, std::memory_order_relaxed);
  stats_->set(Stat::cgroup_limit_bytes, limit);
}

bool PressureMonitor::read_psi(uint64_t now) {
  char text[256];
  uint64_t total = 0;
  if (platform_->read_file(platform_->ctx, psi_path_, text, sizeof text) <= 0 ||
      !parse_psi_some_total(text, &total)) {
    return false;
  }
  bool stalled = false;
  if (psi_ns_ && now > psi_ns_ && total >= psi_total_us_) {
    // Stall time (us) over elapsed time (ns), in per mille.
    stalled = (total - psi_total_us_) * 1000 * 1000 >= (now - psi_ns_) * kPsiStallPerMille;
  }
  psi_total_us_ = total;
  psi_ns_ = now;
  psi_stalled_ = stalled;
  return true;
}

void PressureMonitor::init(const Platform* platform, Stats* stats, bool watch) {
  platform_ = platform;
  stats_ = stats;
  watch_ = watch;
  psi_ns_ = 0;
  uint64_t now_ns = platform_->now_ns(platform_->ctx);
  cgroup_version_ = 0;
  cgroup_limit_.store(0, std::memory_order_relaxed);
  if (!watch) return;
  char text[1024];
  char rel[200];
  if (platform_->read_file(platform_->ctx, "/proc/self/cgroup", text, sizeof text) > 0) {
    int v = parse_proc_cgroup(text, rel, sizeof rel);
    if (v) {
      Writer w(cgroup_dir_, sizeof cgroup_dir_);
      w.put(v == 2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory");
      if (!(rel[0] == '/' && rel[1] == '\0')) w.put(rel);
      w.finish();
      cgroup_version_ = v;
      read_cgroup_limit();
    }
  }
  // PSI: the cgroup's own pressure file first (it sees the limit), else the
  // system's.
  psi_path_[0] = '\0';
  if (cgroup_version_ == 2) {
    Writer w(psi_path_, sizeof psi_path_);
    w.put(cgroup_dir_);
    w.put("/memory.pressure");
    w.finish();
    if (!read_psi(now_ns)) psi_path_[0] = '\0';
  }
  if (!psi_path_[0]) {
    Writer w(psi_path_, sizeof psi_path_);
    w.put("/proc/pressure/memory");
    w.finish();
    if (!read_psi(now_ns)) psi_path_[0] = '\0';
  }
  stats_->set(Stat::pressure_psi_active, psi_path_[0] ? 1 : 0);
  meminfo_ = platform_->read_file(platform_->ctx, "/proc/meminfo", text, sizeof text) > 0;
  stats_->set(Stat::pressure_meminfo_active, meminfo_ ? 1 : 0);
}

PressureRequest PressureMonitor::check(uint64_t now, uint64_t footprint, uint64_t soft_limit, bool files) {
  PressureRequest req;
  auto want = [&](PressureSource src, uint64_t bytes) {
    if (bytes > req.bytes) req = {src, bytes};
  };
  if (soft_limit && footprint > soft_limit) want(PressureSource::kLimit, footprint - soft_limit);
  if (watch_ && files) {
    if (psi_path_[0] && read_psi(now) && psi_stalled_) want(PressureSource::kPsi, ~uint64_t(0));
    if (cgroup_version_) {
      read_cgroup_limit();
      uint64_t limit = cgroup_limit();
      if (limit) {
        char path[320];
        Writer w(path, sizeof path);
        w.put(cgroup_dir_);
        w.put(cgroup_version_ == 2 ? "/memory.current" : "/memory.usage_in_bytes");
        w.finish();
        bool ok;
        uint64_t current = read_u64(path, &ok);
        if (ok && current > kCgroupTrigger.of(limit)) {
          want(PressureSource::kCgroup, current - kCgroupTarget.of(limit));
        }
      }
    }
    if (meminfo_) {
      char text[2048];
      uint64_t total = 0, avail = 0;
      if (platform_->read_file(platform_->ctx, "/proc/meminfo", text, sizeof text) > 0 &&
          parse_meminfo(text, "MemTotal", &total) && parse_meminfo(text, "MemAvailable", &avail) &&
          avail < total / kMeminfoTriggerDiv) {
        want(PressureSource::kMeminfo, total / kMeminfoTargetDiv - avail);
      }
    }
  }
  switch (req.source) {
    case PressureSource::kPsi: stats_->add(Stat::pressure_events_psi, 1); break;
    case PressureSource::kCgroup: stats_->add(Stat::pressure_events_cgroup, 1); break;
    case PressureSource::kMeminfo: stats_->add(Stat::pressure_events_meminfo, 1); break;
    case PressureSource::kLimit: stats_->add(Stat::pressure_events_limit, 1); break;
    default: break;
  }
  return req;
}

}  // namespace lazymalloc
