#include "core/stats.h"

#include "core/format.h"
#include "core/options.h"
#include "lazymalloc/version.h"

namespace lazymalloc {

#define LM_GAUGE_gauge true
#define LM_GAUGE_counter false

const StatInfo kStatInfo[kStatCount] = {
#define LM_STAT_INFO(name, kind, doc) {#name, LM_GAUGE_##kind, doc},
    LAZYMALLOC_GLOBAL_STATS(LM_STAT_INFO)
};
const StatInfo kHeapStatInfo[kHeapStatCount] = {
    LAZYMALLOC_HEAP_STATS(LM_STAT_INFO)
#undef LM_STAT_INFO
};

namespace {

bool same(const char* a, const char* b) {
  while (*a && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

// Characters of the name column: the longest name of any statistic or option.
unsigned name_width() {
  unsigned width = 0;
  auto fit = [&](const char* name) {
    unsigned n = 0;
    while (name[n]) ++n;
    if (n > width) width = n;
  };
  for (unsigned i = 0; i < kStatCount; ++i) fit(kStatInfo[i].name);
  for (unsigned i = 0; i < kHeapStatCount; ++i) fit(kHeapStatInfo[i].name);
  for (unsigned i = 0; i < kOptionCount; ++i) fit(kOptionInfo[i].name);
  return width + 1;  // at least one space before a 16-digit value
}

void write_row(Writer& w, const StatInfo& info, uint64_t value, bool json, bool first, unsigned width) {
  if (json) {
    if (!first) w.put(',');
    w.put('"');
    w.put(info.name);
    w.put("\":");
    w.put_u64(value);
    return;
  }
  w.put("  ");
  size_t col = w.length();
  w.put(info.name);
  w.pad_to(col, width);
  w.put_u64_padded(value, 16);
  w.put("  ");
  w.put(info.doc);
  w.put('\n');
}

}  // namespace

bool stat_find(const char* name, bool* heap_stat, unsigned* index) {
  for (unsigned i = 0; i < kStatCount; ++i) {
    if (same(name, kStatInfo[i].name)) {
      *heap_stat = false;
      *index = i;
      return true;
    }
  }
  for (unsigned i = 0; i < kHeapStatCount; ++i) {
    if (same(name, kHeapStatInfo[i].name)) {
      *heap_stat = true;
      *index = i;
      return true;
    }
  }
  return false;
}

void stats_write(Writer& w, const StatsOrigin& origin, const uint64_t* global, const uint64_t* heap, bool json) {
  const unsigned width = name_width();
  if (json) {
    w.put("{\"pid\":");
    w.put_i64(origin.pid);
    w.put(",\"program\":");
    w.put_json_string(origin.program);
    w.put(",\"time\":\"");
    w.put_utc_time(origin.unix_ms);
    w.put("\",\"version\":\"" LAZYMALLOC_VERSION "\",\"stats\":{");
  } else {
    w.put("lazymalloc " LAZYMALLOC_VERSION " statistics: pid ");
    w.put_i64(origin.pid);
    w.put(", program ");
    w.put(origin.program);
    w.put(", time ");
    w.put_utc_time(origin.unix_ms);
    w.put('\n');
  }
  for (unsigned i = 0; i < kStatCount; ++i) write_row(w, kStatInfo[i], global[i], json, i == 0, width);
  if (!json) w.put(" per-thread heaps (sum):\n");
  for (unsigned i = 0; i < kHeapStatCount; ++i) write_row(w, kHeapStatInfo[i], heap[i], json, false, width);
  if (json) {
    w.put("},\"options\":{");
    options_write(w, true, width);
    w.put("}}\n");
  } else {
    w.put(" options:\n");
    options_write(w, false, width);
  }
}

void stats_path(Writer& w, const char* pattern, const StatsOrigin& origin) {
  for (const char* p = pattern; *p; ++p) {
    if (*p != '%' || (p[1] != 'p' && p[1] != 'e' && p[1] != '%')) {
      w.put(*p);
      continue;
    }
    ++p;
    if (*p == 'p') {
      w.put_i64(origin.pid);
    } else if (*p == 'e') {
      for (const char* c = origin.program; *c; ++c) w.put(*c == '/' ? '_' : *c);
    } else {
      w.put('%');
    }
  }
}

}  // namespace lazymalloc
