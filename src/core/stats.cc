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

void write_row(Writer& w, const StatInfo& info, uint64_t value, bool json, bool first) {
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
  w.pad_to(col, 24);
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

void stats_write(Writer& w, const uint64_t* global, const uint64_t* heap, bool json) {
  if (json) {
    w.put("{\"version\":\"" LAZYMALLOC_VERSION "\",\"stats\":{");
  } else {
    w.put("lazymalloc " LAZYMALLOC_VERSION " statistics\n");
  }
  for (unsigned i = 0; i < kStatCount; ++i) write_row(w, kStatInfo[i], global[i], json, i == 0);
  if (!json) w.put(" per-thread heaps (sum):\n");
  for (unsigned i = 0; i < kHeapStatCount; ++i) write_row(w, kHeapStatInfo[i], heap[i], json, false);
  if (json) {
    w.put("},\"options\":{");
    options_write(w, true);
    w.put("}}\n");
  } else {
    w.put(" options:\n");
    options_write(w, false);
  }
}

}  // namespace lazymalloc
