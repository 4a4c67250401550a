// Size classes, bit helpers, options and statistics tables.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/bits.h"
#include "core/format.h"
#include "core/options.h"
#include "core/stats.h"
#include "frontend/size_class.h"
#include "lazymalloc/version.h"

namespace lazymalloc {
namespace {

TEST(SizeClass, CoversEverySizeWithBoundedWaste) {
  for (size_t s = 1; s <= kMaxSmall; s += (s < 4096 ? 1 : 61)) {
    unsigned c = size_class(s);
    ASSERT_LT(c, kSmallClasses) << s;
    ASSERT_GE(class_size(c), s) << s;
    if (c > 0) ASSERT_LT(class_size(c - 1), s) << s;  // smallest class that fits
    if (s > 16) ASSERT_LE(class_size(c) * 4, s * 5 + 64) << s;  // <= 25% waste
    ASSERT_EQ(class_size(c) % 16, 0u);
  }
  EXPECT_EQ(size_class(kMaxSmall), kSmallClasses - 1);
}

// A page and its header (4 KiB and a few hundred bytes: sqlite's page cache
// allocates 4,368 bytes a page, its allocations of 4 KiB 4,104 with their
// prefix) lose at most 512 bytes: the classes from 4 to 8 KiB are 512
// bytes apart, and the powers of two around them are still classes.
TEST(SizeClass, SizesFrom4To8KiBRoundUpByAtMost512Bytes) {
  for (size_t s = 4097; s <= 8192; ++s) {
    const size_t got = class_size(size_class(s));
    ASSERT_LT(got - s, 512u) << s;
    ASSERT_EQ(got % 512, 0u) << s;
  }
  EXPECT_EQ(class_size(size_class(4104)), 4608u);
  EXPECT_EQ(class_size(size_class(4368)), 4608u);
  EXPECT_EQ(class_size(size_class(4096)), 4096u);
  EXPECT_EQ(class_size(size_class(8193)), 10240u);  // four classes a power of two again
  EXPECT_EQ(class_size(size_class(16384 + 1)), 20480u);
}

// Above 64 KiB, eight classes a power of two (issue #16, fifteenth round):
// Python's 70,000-byte buffers took 80 KiB each.
TEST(SizeClass, SizesFrom64To256KiBRoundUpByLessThanAnEighthOfTheirPowerOfTwo) {
  for (size_t s = 65537; s <= kMaxSmall; ++s) {
    const size_t pow2 = s <= 131072 ? 65536 : 131072;
    const size_t got = class_size(size_class(s));
    ASSERT_GE(got, s);
    ASSERT_LT(got - s, pow2 / 8) << s;
    ASSERT_EQ(got % (pow2 / 8), 0u) << s;
  }
  EXPECT_EQ(class_size(size_class(70000)), 73728u);
  EXPECT_EQ(class_size(size_class(65536)), 65536u);  // four classes a power of two below
  EXPECT_EQ(class_size(size_class(32769)), 40960u);
  EXPECT_EQ(class_size(size_class(kMaxSmall)), kMaxSmall);
}

TEST(SizeClass, AlignedClassesAreMultiplesOfTheAlignment) {
  for (size_t align = 32; align <= kUnitSize; align *= 2) {
    for (size_t s : {size_t(1), size_t(17), align - 1, align, align + 1, 3 * align + 5, size_t(100000)}) {
      unsigned c = class_for_aligned(s, align);
      if (c == kSmallClasses) {
        EXPECT_GT(align_up(s, align), kMaxSmall / 2) << s << " " << align;
        continue;
      }
      EXPECT_EQ(class_size(c) % align, 0u) << s << " " << align;
      EXPECT_GE(class_size(c), s);
    }
  }
}

// At least 8 objects up to 16 KiB, 128 KiB's worth above (at least one
// object), with little tail: at most 1/8 of the span, or the least any
// span of at most 5 units leaves; no span of a big class beyond 5 units.
TEST(SizeClass, SpansHoldEightObjectsOr128KiBWithLittleTail) {
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    size_t bytes = span_units(c) * kUnitSize;
    const size_t size = class_size(c);
    EXPECT_GE(bytes / size, size <= 16384 ? 8u : std::max<size_t>(1, (128 << 10) / size)) << c;
    EXPECT_LE(span_units(c), size <= 8192 ? 1u : 5u) << c;
    if ((bytes % size) * 8 <= bytes) continue;
    for (size_t n = 1; n <= 5; ++n) {
      const size_t other = n * kUnitSize;
      if (other < size) continue;
      EXPECT_LE((bytes % size) * other, (other % size) * bytes) << c << ": " << n << " units leave less";
    }
  }
}

// The free path's geometry: every offset of every class's span, against
// division.
TEST(SizeClass, ObjectPosMatchesDivisionForEveryOffset) {
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    const size_t size = class_size(c);
    const uint64_t magic = class_magic(size);
    const size_t bytes = size_t(span_units(c)) * kUnitSize;
    for (uint64_t off = 0; off < bytes; ++off) {
      ObjectPos pos = object_pos(off, magic);
      ASSERT_EQ(pos.index, off / size) << "class " << c << " offset " << off;
      ASSERT_EQ(pos.start, off % size == 0) << "class " << c << " offset " << off;
    }
  }
}

TEST(Bits, FindZeroRunMatchesBruteForce) {
  uint32_t x = 12345;
  for (int iter = 0; iter < 20000; ++iter) {
    x = x * 1664525u + 1013904223u;
    uint32_t used = x & (x >> 7) & (x << 3);
    if (iter % 5 == 0) used = x | (x >> 1);
    for (unsigned n = 1; n <= 32; ++n) {
      int expect = -1;
      for (unsigned i = 0; i + n <= 32 && expect < 0; ++i) {
        if ((used & bit_range(i, n)) == 0) expect = int(i);
      }
      ASSERT_EQ(find_zero_run(used, n), expect) << std::hex << used << " n=" << n;
    }
  }
}

// fit_units against a brute force over every hole's two end windows:
// fewest units outside `resident`, then the smallest hole, then the lowest
// index.
TEST(Bits, FitUnitsMatchesBruteForce) {
  uint32_t x = 777;
  unsigned found = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    x = x * 1664525u + 1013904223u;
    uint32_t used = x & (x >> 5);
    if (iter % 4 == 0) used = x | (x >> 2);
    x = x * 1664525u + 1013904223u;
    uint32_t resident = ~used & x;
    for (unsigned n = 1; n <= 32; ++n) {
      bool any = false;
      unsigned best_fresh = 0, best_spare = 0, best_index = 0;
      for (unsigned i = 0; i < 32;) {
        if (used >> i & 1) {
          ++i;
          continue;
        }
        unsigned j = i;
        while (j < 32 && !(used >> j & 1)) ++j;
        unsigned len = j - i;
        if (len >= n) {
          for (unsigned at : {i, j - n}) {
            unsigned fresh = unsigned(__builtin_popcount(bit_range(at, n) & ~resident));
            unsigned spare = len - n;
            bool better = !any || fresh < best_fresh || (fresh == best_fresh && spare < best_spare) ||
                          (fresh == best_fresh && spare == best_spare && at < best_index);
            if (better) {
              any = true;
              best_fresh = fresh;
              best_spare = spare;
              best_index = at;
            }
          }
        }
        i = j;
      }
      UnitFit f = fit_units(used, resident, n);
      ASSERT_EQ(f.found(), any) << std::hex << used << " n=" << std::dec << n;
      if (!any) continue;
      ++found;
      ASSERT_EQ(f.index, best_index) << std::hex << used << " " << resident << " n=" << std::dec << n;
      ASSERT_EQ(f.fresh, best_fresh);
      ASSERT_EQ(f.spare, best_spare);
    }
  }
  EXPECT_GT(found, 100000u);  // the fits found, not only misses
}

TEST(Options, ParsesEveryKind) {
  int64_t v = 0;
  unsigned batch = option_find("purge_batch");
  ASSERT_LT(batch, kOptionCount);
  EXPECT_TRUE(option_parse(batch, "4M", &v));
  EXPECT_EQ(v, 4 << 20);
  EXPECT_TRUE(option_parse(batch, "64KiB", &v));
  EXPECT_EQ(v, 64 << 10);
  EXPECT_FALSE(option_parse(batch, "1K", &v));  // below the minimum
  EXPECT_FALSE(option_parse(batch, "12Q", &v));
  unsigned purge = option_find("PURGE");
  EXPECT_TRUE(option_parse(purge, "eager", &v));
  EXPECT_EQ(v, kPurgeEager);
  EXPECT_TRUE(option_parse(purge, "Never", &v));
  EXPECT_EQ(v, kPurgeNever);
  EXPECT_FALSE(option_parse(purge, "sometimes", &v));
  unsigned bg = option_find("background");
  EXPECT_TRUE(option_parse(bg, "off", &v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(option_parse(bg, "yes", &v));
  EXPECT_EQ(v, 1);
  // hugepages was a boolean: its words still read as off and on.
  unsigned huge = option_find("hugepages");
  for (auto [text, want] : {std::pair<const char*, int64_t>{"reused", kHugepagesReused}, {"AUTO", kHugepagesAuto},
                            {"no", kHugepagesOff}, {"true", kHugepagesOn}, {"0", kHugepagesOff}, {"1", kHugepagesOn}}) {
    v = -1;
    EXPECT_TRUE(option_parse(huge, text, &v)) << text;
    EXPECT_EQ(v, want) << text;
  }
  EXPECT_FALSE(option_parse(huge, "sometimes", &v));
  EXPECT_FALSE(option_parse(huge, "4", &v));
  EXPECT_FALSE(option_parse(purge, "yes", &v)) << "only an enumeration that starts off|on takes boolean words";
  unsigned decay = option_find("decay_ms");
  EXPECT_TRUE(option_parse(decay, "2s", &v));
  EXPECT_EQ(v, 2000);
  EXPECT_EQ(option_find("no_such_option"), kOptionCount);
}

TEST(Options, LoadsFromEnvironmentAndReportsBadValues) {
  std::string bad;
  static std::string* sink;
  sink = &bad;
  char e1[] = "LAZYMALLOC_DECAY_MS=250";
  char e2[] = "LAZYMALLOC_PURGE_BATCH=banana";
  char e3[] = "OTHER=1";
  char* envp[] = {e1, e2, e3, nullptr};
  int64_t old_decay = option(Opt::decay_ms), old_batch = option(Opt::purge_batch);
  options_load(envp, [](const char* msg, size_t len) { sink->append(msg, len); });
  EXPECT_EQ(option(Opt::decay_ms), 250);
  EXPECT_EQ(option(Opt::purge_batch), old_batch);
  EXPECT_NE(bad.find("LAZYMALLOC_PURGE_BATCH"), std::string::npos) << bad;
  option_set(unsigned(Opt::decay_ms), old_decay);
}

// options_load on `vars`, with every line it reports; the options are
// restored afterwards.
struct Loaded {
  unsigned problems;
  std::string report;
  int64_t values[kOptionCount];
};
Loaded load(std::vector<std::string> vars) {
  static std::string* sink;
  Loaded out{};
  sink = &out.report;
  int64_t saved[kOptionCount];
  for (unsigned o = 0; o < kOptionCount; ++o) saved[o] = g_option_values[o].load();
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  out.problems = options_load(envp.data(), [](const char* msg, size_t len) { sink->append(msg, len); });
  for (unsigned o = 0; o < kOptionCount; ++o) {
    out.values[o] = g_option_values[o].load();
    g_option_values[o].store(saved[o]);
  }
  return out;
}

TEST(Options, UnknownVariableIsReportedWithTheClosestNames) {
  const Loaded l = load({"LAZYMALLOC_DECAY_MSS=5", "LAZYMALLOC_DECAY_MS=300"});
  EXPECT_EQ(l.problems, 1u);
  EXPECT_EQ(l.report,
            "lazymalloc: LAZYMALLOC_DECAY_MSS=5: unknown variable, ignored (did you mean LAZYMALLOC_DECAY_MS?)\n");
  EXPECT_EQ(l.values[unsigned(Opt::decay_ms)], 300);
  // Several close names, closest first; none for a name like no other.
  const Loaded d = load({"LAZYMALLOC_decay=1", "LAZYMALLOC_QWERTYUIOP=1"});
  EXPECT_EQ(d.problems, 2u);
  EXPECT_NE(d.report.find("LAZYMALLOC_decay=1: unknown variable, ignored (did you mean LAZYMALLOC_DECAY_MS, "
                          "LAZYMALLOC_LAZY_DECAY_MS or LAZYMALLOC_PARTIAL_DECAY_MS?)\n"),
            std::string::npos)
      << d.report;
  EXPECT_NE(d.report.find("lazymalloc: LAZYMALLOC_QWERTYUIOP=1: unknown variable, ignored\n"), std::string::npos)
      << d.report;
}

TEST(Options, BadValueIsReportedWithTheValueUsed) {
  const Loaded l = load({"LAZYMALLOC_MEMORY_LIMIT=-5G", "LAZYMALLOC_PURGE_BATCH=5X", "LAZYMALLOC_PURGE=lazy"});
  EXPECT_EQ(l.problems, 3u);
  EXPECT_EQ(l.report,
            "lazymalloc: LAZYMALLOC_MEMORY_LIMIT=-5G: bad value, expected bytes, 0 to 1024T (suffix K, M, G or T: "
            "powers of 1024); using 0 (the default)\n"
            "lazymalloc: LAZYMALLOC_PURGE_BATCH=5X: bad value, expected bytes, 64K to 1T (suffix K, M, G or T: "
            "powers of 1024); using 32M (the default)\n"
            "lazymalloc: LAZYMALLOC_PURGE=lazy: bad value, expected adaptive, decay, eager, never (or the index, 0 "
            "to 3); using adaptive (the default)\n");
  EXPECT_EQ(l.values[unsigned(Opt::memory_limit)], 0);
  EXPECT_EQ(l.values[unsigned(Opt::purge_batch)], kOptionInfo[unsigned(Opt::purge_batch)].def);
}

TEST(Options, VariablesOfLazymallocAndItsToolsAreKnown) {
  const Loaded l = load({"LAZYMALLOC_STATS=json", "LAZYMALLOC_STATS_PID=123", "LAZYMALLOC_STATS_FILE=/tmp/x.%p",
                         "LAZYMALLOC_LIB=/x.so", "LAZYMALLOC_TEST_SCALE=0.25", "LAZYMALLOC_ABORT_ON_BAD_OPTION=1",
                         "LAZYMALLOC_VERBOSE=0", "LAZYMALLOCX=1", "OTHER_DECAY_MS=1"});
  EXPECT_EQ(l.problems, 0u);
  EXPECT_EQ(l.report, "");
  EXPECT_EQ(l.values[unsigned(Opt::stats)], 2);
  EXPECT_EQ(l.values[unsigned(Opt::stats_pid)], 123);
  EXPECT_EQ(l.values[unsigned(Opt::abort_on_bad_option)], 1);
}

TEST(Options, SuggestionsAndValues) {
  unsigned near[3];
  ASSERT_EQ(option_suggest("memroy_limit", 12, near, 3), 1u);
  EXPECT_STREQ(option_suggestion_name(near[0]), "memory_limit");
  ASSERT_EQ(option_suggest("stat", 4, near, 3), 3u);  // one edit, then the names that contain it
  EXPECT_STREQ(option_suggestion_name(near[0]), "stats");
  EXPECT_STREQ(option_suggestion_name(near[1]), "stats_pid");
  EXPECT_STREQ(option_suggestion_name(near[2]), "stats_file");
  EXPECT_EQ(option_suggest("abc", 3, near, 3), 0u);  // not "lib": two edits of three letters
  ASSERT_GE(option_suggest("STATS-FILES", 11, near, 3), 1u);
  EXPECT_STREQ(option_suggestion_name(near[0]), "stats_file");
  EXPECT_EQ(option_suggest("zzzzzzzz", 8, near, 3), 0u);
  char buf[128];
  auto value = [&](Opt o, int64_t v) {
    Writer w(buf, sizeof buf);
    option_write_value(w, kOptionInfo[unsigned(o)], v);
    w.finish();
    return std::string(buf);
  };
  EXPECT_EQ(value(Opt::purge, kPurgeNever), "never");
  EXPECT_EQ(value(Opt::purge_batch, 3 << 20), "3M");
  EXPECT_EQ(value(Opt::purge_batch, 1000), "1000");
  EXPECT_EQ(value(Opt::decay_ms, 250), "250 ms");
}

StatsOrigin test_origin() { return StatsOrigin{4242, "my \"prog\"", 1796078201123}; }

TEST(Stats, ReportStartsWithPidProgramAndTime) {
  uint64_t global[kStatCount] = {}, heap[kHeapStatCount] = {};
  char buf[32768];
  Writer j(buf, sizeof buf);
  stats_write(j, test_origin(), global, heap, true);
  ASSERT_LT(j.finish(), sizeof buf);
  EXPECT_EQ(std::string(buf).rfind("{\"pid\":4242,\"program\":\"my \\\"prog\\\"\",\"time\":\"2026-11-30T22:36:41.123Z\","
                                   "\"version\":",
                                   0),
            0u)
      << buf;
  // Enumerations by name.
  EXPECT_NE(std::string(buf).find("\"purge\":\"adaptive\",\"purge_advice\":\"auto\""), std::string::npos) << buf;
  Writer t(buf, sizeof buf);
  stats_write(t, test_origin(), global, heap, false);
  ASSERT_LT(t.finish(), sizeof buf);
  const std::string text(buf);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "lazymalloc " LAZYMALLOC_VERSION " statistics: pid 4242, program my \"prog\", time 2026-11-30T22:36:41.123Z");
  EXPECT_NE(text.find("\n  purge "), std::string::npos) << text;
  EXPECT_NE(text.find(" adaptive\n"), std::string::npos) << text;
}

TEST(Stats, TextValuesShareOneColumn) {
  uint64_t global[kStatCount], heap[kHeapStatCount];
  for (unsigned i = 0; i < kStatCount; ++i) global[i] = 7;
  for (unsigned i = 0; i < kHeapStatCount; ++i) heap[i] = 7;
  char buf[32768];
  Writer t(buf, sizeof buf);
  stats_write(t, test_origin(), global, heap, false);
  ASSERT_LT(t.finish(), sizeof buf);
  // Every value (statistic or option) ends in the same column, whatever the
  // length of the name.
  std::istringstream in(buf);
  std::string line;
  size_t value_end = 0, rows = 0, options = 0, held = 0;
  bool in_options = false, in_held = false;
  while (std::getline(in, line)) {
    if (line == " options:") in_options = true, in_held = false;
    if (line.rfind(" where the held bytes are", 0) == 0) in_held = true;
    if (line.size() < 3 || line[0] != ' ' || line[1] != ' ') continue;
    const size_t name_end = line.find(' ', 2);
    const size_t value = line.find_first_not_of(' ', name_end);
    ASSERT_NE(value, std::string::npos) << line;
    const size_t end = std::min(line.find(' ', value), line.size());
    if (!value_end) value_end = end;
    EXPECT_EQ(end, value_end) << line;
    if (in_options) {
      ++options;
    } else if (in_held) {
      ++held;  // derived from the statistics, not 7
    } else {
      EXPECT_EQ(line.substr(value, end - value), "7") << line;
      ++rows;
    }
  }
  EXPECT_EQ(rows, size_t(kStatCount + kHeapStatCount));
  EXPECT_EQ(held, size_t(kHeldCount));
  EXPECT_EQ(options, size_t(kOptionCount));
}

TEST(Stats, FilePatternNamesTheProcess) {
  char buf[256];
  Writer w(buf, sizeof buf);
  stats_path(w, "/tmp/lm.%e.%p.%%.%x%", StatsOrigin{77, "a/b", 0});
  w.finish();
  EXPECT_STREQ(buf, "/tmp/lm.a_b.77.%.%x%");
}

TEST(Writer, UtcTimeAndJsonStrings) {
  char buf[128];
  auto time = [&](uint64_t ms) {
    Writer w(buf, sizeof buf);
    w.put_utc_time(ms);
    w.finish();
    return std::string(buf);
  };
  EXPECT_EQ(time(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(time(951868799999), "2000-02-29T23:59:59.999Z");
  EXPECT_EQ(time(4107542400007), "2100-03-01T00:00:00.007Z");
  EXPECT_EQ(time(1796078201123), "2026-11-30T22:36:41.123Z");
  Writer w(buf, sizeof buf);
  w.put_json_string("a\"b\\c\n\x01");
  w.finish();
  EXPECT_STREQ(buf, "\"a\\\"b\\\\c\\u000a\\u0001\"");
}

TEST(Stats, JsonAndTextNameEveryCounter) {
  uint64_t global[kStatCount], heap[kHeapStatCount];
  for (unsigned i = 0; i < kStatCount; ++i) global[i] = 1000 + i;
  for (unsigned i = 0; i < kHeapStatCount; ++i) heap[i] = 5000 + i;
  char buf[32768];
  Writer j(buf, sizeof buf);
  stats_write(j, test_origin(), global, heap, true);
  ASSERT_LT(j.finish(), sizeof buf);
  std::string json(buf);
  Writer t(buf, sizeof buf);
  stats_write(t, test_origin(), global, heap, false);
  ASSERT_LT(t.finish(), sizeof buf);
  std::string text(buf);
  for (unsigned i = 0; i < kStatCount; ++i) {
    std::string key = std::string("\"") + kStatInfo[i].name + "\":" + std::to_string(1000 + i);
    EXPECT_NE(json.find(key), std::string::npos) << key;
    EXPECT_NE(text.find(kStatInfo[i].name), std::string::npos);
  }
  for (unsigned i = 0; i < kHeapStatCount; ++i) {
    std::string key = std::string("\"") + kHeapStatInfo[i].name + "\":" + std::to_string(5000 + i);
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
  EXPECT_EQ(json.front(), '{');
  EXPECT_LT(t.length(), 24576u) << "the text report without classes outgrew lm_stats_print's stack buffer";
  EXPECT_NE(json.find("\"options\":{"), std::string::npos);
  bool is_heap;
  unsigned idx;
  EXPECT_TRUE(stat_find("lazy_bytes", &is_heap, &idx));
  EXPECT_FALSE(is_heap);
  EXPECT_TRUE(stat_find("remote_frees", &is_heap, &idx));
  EXPECT_TRUE(is_heap);
  EXPECT_FALSE(stat_find("nope", &is_heap, &idx));
  // The held rows, printed with the statistics, are found by name too.
  EXPECT_TRUE(held_find("small_in_use", &idx));
  EXPECT_EQ(idx, unsigned(Held::small_in_use));
  EXPECT_FALSE(held_find("lazy_bytes", &idx));
}

// Per-class statistics: a row per class with any value, every statistic by
// name in both forms, and outstanding_bytes (taken less returned) after
// them; the whole report with every class fits lm_stats_print's buffer.
TEST(Stats, ClassRowsNameEveryStatisticForTheClassesWithAny) {
  uint64_t global[kStatCount] = {}, heap[kHeapStatCount] = {};
  constexpr unsigned kRows = 52;
  uint32_t size[kRows];
  uint64_t v[kRows * kClassStatCount] = {};
  for (unsigned c = 0; c < kRows; ++c) {
    size[c] = 16 * (c + 1);
    if (c == 3) continue;  // no value: no row
    for (unsigned k = 0; k < kClassStatCount; ++k) v[c * kClassStatCount + k] = 100000000000000ull + 1000 * c + k;
    v[c * kClassStatCount + unsigned(ClassStat::returned_bytes)] = 7 * c;
  }
  const ClassRows rows{kRows, size, v};
  std::vector<char> buf(kStatsReportBytes + 1);
  Writer j(buf.data(), buf.size());
  stats_write(j, test_origin(), global, heap, true, nullptr, 0, &rows);
  ASSERT_LT(j.finish(), buf.size());
  const std::string json(buf.data());
  Writer t(buf.data(), buf.size());
  stats_write(t, test_origin(), global, heap, false, nullptr, 0, &rows);
  ASSERT_LT(t.finish(), kStatsReportBytes) << "lm_stats_print's buffer is too small for the text report";
  const std::string text(buf.data());

  const size_t at = json.find("\"classes\":[");
  ASSERT_NE(at, std::string::npos) << json;
  EXPECT_LT(json.find("\"held\":{"), at);
  EXPECT_GT(json.find("\"options\":{"), at);
  const std::string arr = json.substr(at, json.find(']', at) - at);
  EXPECT_EQ(std::count(arr.begin(), arr.end(), '{'), kRows - 1) << arr;
  EXPECT_EQ(arr.find("{\"size\":64,"), std::string::npos) << "a class with no value has no row";
  for (unsigned c : {0u, 5u, kRows - 1}) {
    const uint64_t* r = v + c * kClassStatCount;
    std::string row = "{\"size\":" + std::to_string(size[c]);
    for (unsigned k = 0; k < kClassStatCount; ++k) {
      row += ",\"" + std::string(kClassStatInfo[k].name) + "\":" + std::to_string(r[k]);
    }
    row += ",\"outstanding_bytes\":" +
           std::to_string(r[unsigned(ClassStat::taken_bytes)] - r[unsigned(ClassStat::returned_bytes)]) + "}";
    EXPECT_NE(arr.find(row), std::string::npos) << row << "\n" << arr;
  }

  // Text: each statistic's description, a header, then one line per class
  // whose numbers are the JSON's.
  for (unsigned k = 0; k < kClassStatCount; ++k) {
    EXPECT_NE(text.find(std::string("  ") + kClassStatInfo[k].name + ": " + kClassStatInfo[k].doc + "\n"),
              std::string::npos)
        << kClassStatInfo[k].name;
  }
  std::istringstream in(text.substr(text.find("\n size classes (") + 1));
  std::string line;
  std::vector<std::vector<std::string>> table;
  while (std::getline(in, line) && line.rfind(" thread caches", 0) != 0 && line != " options:") {
    if (line.find(": ") != std::string::npos || line.rfind(" size classes", 0) == 0) continue;
    std::istringstream cells(line);
    std::vector<std::string> row;
    for (std::string cell; cells >> cell;) row.push_back(cell);
    table.push_back(row);
  }
  ASSERT_EQ(table.size(), size_t(kRows));  // the header and kRows - 1 classes
  ASSERT_EQ(table[0].size(), size_t(kClassStatCount + 2));
  EXPECT_EQ(table[0].front(), "size");
  EXPECT_EQ(table[0].back(), "outstanding_bytes");
  EXPECT_EQ(table[1].front(), "16");
  EXPECT_EQ(table[1][1 + unsigned(ClassStat::span_bytes)], std::to_string(v[unsigned(ClassStat::span_bytes)]));
  EXPECT_EQ(table[4].front(), "80") << "the row of 64 is left out";
}

TEST(Writer, TruncatesButCountsTheWholeLength) {
  char buf[8];
  Writer w(buf, sizeof buf);
  w.put("hello, world");
  w.put_u64(12345);
  EXPECT_EQ(w.finish(), 17u);
  EXPECT_STREQ(buf, "hello, ");
  char big[64];
  Writer w2(big, sizeof big);
  w2.put_fixed(12345, 2);
  w2.put(' ');
  w2.put_hex(0xbeef);
  w2.put(' ');
  w2.put_i64(-42);
  w2.finish();
  EXPECT_STREQ(big, "123.45 0xbeef -42");
}

}  // namespace
}  // namespace lazymalloc
