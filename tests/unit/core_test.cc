// Size classes, bit helpers, options and statistics tables.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/bits.h"
#include "core/format.h"
#include "core/options.h"
#include "core/stats.h"
#include "frontend/size_class.h"

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

TEST(SizeClass, SpansHoldAtLeastEightObjectsWithLittleTail) {
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    size_t bytes = span_units(c) * kUnitSize;
    EXPECT_GE(bytes / class_size(c), 8u) << c;
    EXPECT_LE((bytes % class_size(c)) * 8, bytes) << c;
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

TEST(Stats, JsonAndTextNameEveryCounter) {
  uint64_t global[kStatCount], heap[kHeapStatCount];
  for (unsigned i = 0; i < kStatCount; ++i) global[i] = 1000 + i;
  for (unsigned i = 0; i < kHeapStatCount; ++i) heap[i] = 5000 + i;
  char buf[32768];
  Writer j(buf, sizeof buf);
  stats_write(j, global, heap, true);
  ASSERT_LT(j.finish(), sizeof buf);
  std::string json(buf);
  Writer t(buf, sizeof buf);
  stats_write(t, global, heap, false);
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
  EXPECT_NE(json.find("\"options\":{"), std::string::npos);
  bool is_heap;
  unsigned idx;
  EXPECT_TRUE(stat_find("lazy_bytes", &is_heap, &idx));
  EXPECT_FALSE(is_heap);
  EXPECT_TRUE(stat_find("remote_frees", &is_heap, &idx));
  EXPECT_TRUE(is_heap);
  EXPECT_FALSE(stat_find("nope", &is_heap, &idx));
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
