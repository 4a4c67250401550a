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
};
const StatInfo kClassStatInfo[kClassStatCount] = {
    LAZYMALLOC_CLASS_STATS(LM_STAT_INFO)
#undef LM_STAT_INFO
};
const StatInfo kClassOutstandingInfo = {
    "outstanding_bytes", true,
    "taken_bytes less returned_bytes: the class's objects in use or in threads' caches (the rest of "
    "carved_bytes is free objects in the spans)"};

const HeldInfo kHeldInfo[kHeldCount] = {
#define LM_HELD_INFO(name, doc) {#name, doc},
    LAZYMALLOC_HELD_ROWS(LM_HELD_INFO)
#undef LM_HELD_INFO
};

void held_rows(const uint64_t* global, const uint64_t* heap, uint64_t* out) {
  auto g = [&](Stat s) { return global[unsigned(s)]; };
  auto h = [&](HeapStat s) { return heap[unsigned(s)]; };
  auto sub = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
  const uint64_t spans = g(Stat::small_span_bytes);
  // Handed out of spans and not back: in use or cached (the caches are
  // published at slow paths only, so the split may lag; the sum does not).
  uint64_t out_of_spans = h(HeapStat::span_taken_bytes) - h(HeapStat::span_returned_bytes) -
                          g(Stat::orphan_return_bytes);
  if (int64_t(out_of_spans) < 0) out_of_spans = 0;
  if (out_of_spans > spans) out_of_spans = spans;
  const uint64_t cached = h(HeapStat::cache_bytes) < out_of_spans ? h(HeapStat::cache_bytes) : out_of_spans;
  out[unsigned(Held::small_in_use)] = out_of_spans - cached;
  out[unsigned(Held::thread_caches)] = cached;
  out[unsigned(Held::small_span_free)] = spans - out_of_spans;
  out[unsigned(Held::small_span_purged)] = g(Stat::span_purged_bytes);
  const uint64_t large = sub(g(Stat::active_bytes), spans);
  const uint64_t large_cached = g(Stat::large_cache_bytes) < large ? g(Stat::large_cache_bytes) : large;
  out[unsigned(Held::large_blocks)] = large - large_cached;
  out[unsigned(Held::large_cached)] = large_cached;
  out[unsigned(Held::retained)] = g(Stat::retained_bytes);
  out[unsigned(Held::lazy)] = g(Stat::lazy_bytes);
  out[unsigned(Held::metadata)] = sub(g(Stat::metadata_bytes), g(Stat::metadata_purged_bytes));
}

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
  for (unsigned i = 0; i < kHeldCount; ++i) fit(kHeldInfo[i].name);
  return width + 1;  // at least one space before a 16-digit value
}

// `"name":value` in a JSON object, after a comma unless `first`.
void put_json_field(Writer& w, const char* name, uint64_t value, bool first) {
  if (!first) w.put(',');
  w.put('"');
  w.put(name);
  w.put("\":");
  w.put_u64(value);
}

void write_row(Writer& w, const StatInfo& info, uint64_t value, bool json, bool first, unsigned width) {
  if (json) return put_json_field(w, info.name, value, first);
  w.put("  ");
  size_t col = w.length();
  w.put(info.name);
  w.pad_to(col, width);
  w.put_u64_padded(value, 16);
  w.put("  ");
  w.put(info.doc);
  w.put('\n');
}

// The per-class statistics (ClassRows): the classes with any value, their
// columns the class size, kClassStatInfo's and kClassOutstandingInfo.  Text:
// a legend (each column's description), then a table; JSON: closes "held"
// and writes "classes":[{"size":..,..},..].
void write_classes(Writer& w, const ClassRows& rows, bool json) {
  constexpr unsigned kColumn = 18;  // the longest name, and a space
  auto cell = [&](const char* name, uint64_t v, bool first) {
    if (json) return put_json_field(w, name, v, first);
    w.put_u64_padded(v, kColumn);
  };
  auto header = [&](const char* name) {
    size_t n = 0;
    while (name[n]) ++n;
    for (size_t i = n; i < kColumn; ++i) w.put(' ');
    w.put(name);
  };
  if (json) {
    w.put("},\"classes\":[");
  } else {
    w.put(" size classes (summed over heaps; the classes with any):\n");
    const StatInfo size_info{"size", true, "bytes of the class's objects"};
    auto legend = [&](const StatInfo& info) {
      w.put("  ");
      w.put(info.name);
      w.put(": ");
      w.put(info.doc);
      w.put('\n');
    };
    legend(size_info);
    for (unsigned k = 0; k < kClassStatCount; ++k) legend(kClassStatInfo[k]);
    legend(kClassOutstandingInfo);
    header(size_info.name);
    for (unsigned k = 0; k < kClassStatCount; ++k) header(kClassStatInfo[k].name);
    header(kClassOutstandingInfo.name);
    w.put('\n');
  }
  bool first_row = true;
  for (unsigned c = 0; c < rows.n; ++c) {
    const uint64_t* v = rows.v + size_t(c) * kClassStatCount;
    bool any = false;
    for (unsigned k = 0; k < kClassStatCount; ++k) any |= v[k] != 0;
    if (!any) continue;
    if (json) w.put(first_row ? "{" : ",{");
    first_row = false;
    cell("size", rows.size[c], true);
    for (unsigned k = 0; k < kClassStatCount; ++k) cell(kClassStatInfo[k].name, v[k], false);
    cell(kClassOutstandingInfo.name,
         v[unsigned(ClassStat::taken_bytes)] - v[unsigned(ClassStat::returned_bytes)], false);
    w.put(json ? "}" : "\n");
  }
  if (json) w.put(']');
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

bool class_stat_parse(const char* name, uint64_t* size, unsigned* index) {
  const char prefix[] = "classes.";
  for (unsigned i = 0; i + 1 < sizeof prefix; ++i) {
    if (name[i] != prefix[i]) return false;
  }
  const char* p = name + sizeof prefix - 1;
  uint64_t n = 0;
  if (*p < '0' || *p > '9') return false;
  for (; *p >= '0' && *p <= '9'; ++p) {
    if (n > (UINT64_MAX - 9) / 10) return false;
    n = n * 10 + unsigned(*p - '0');
  }
  if (*p++ != '.') return false;
  for (unsigned k = 0; k <= kClassStatCount; ++k) {
    if (same(p, k < kClassStatCount ? kClassStatInfo[k].name : kClassOutstandingInfo.name)) {
      *size = n;
      *index = k;
      return true;
    }
  }
  return false;
}

bool held_find(const char* name, unsigned* index) {
  for (unsigned i = 0; i < kHeldCount; ++i) {
    if (same(name, kHeldInfo[i].name)) {
      *index = i;
      return true;
    }
  }
  return false;
}

void stats_write(Writer& w, const StatsOrigin& origin, const uint64_t* global, const uint64_t* heap, bool json,
                 const uint64_t* heap_cache, unsigned nheaps, const ClassRows* classes) {
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
  uint64_t held[kHeldCount];
  held_rows(global, heap, held);
  if (json) {
    w.put("},\"held\":{");
  } else {
    w.put(" where the held bytes are (active + retained + lazy + metadata):\n");
  }
  for (unsigned i = 0; i < kHeldCount; ++i) {
    write_row(w, StatInfo{kHeldInfo[i].name, true, kHeldInfo[i].doc}, held[i], json, i == 0, width);
  }
  const unsigned shown = nheaps < 64 ? nheaps : 64;
  if (classes) write_classes(w, *classes, json);
  if (json) {
    w.put(classes ? ",\"heap_cache_bytes\":[" : "},\"heap_cache_bytes\":[");
    for (unsigned i = 0; i < shown; ++i) {
      if (i) w.put(',');
      w.put_u64(heap_cache[i]);
    }
    w.put(']');
  } else if (shown) {
    w.put(" thread caches per heap (bytes, newest heap first):\n  ");
    for (unsigned i = 0; i < shown; ++i) {
      w.put(' ');
      w.put_u64(heap_cache[i]);
    }
    if (nheaps > shown) w.put(" ...");
    w.put('\n');
  }
  if (json) {
    w.put(",\"options\":{");
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
