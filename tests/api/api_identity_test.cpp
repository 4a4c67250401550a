// Proves that the test process really runs on lazymalloc: the version, that
// blocks from every standard entry point (and from inside libc) belong to
// it, and that its statistics are reachable.
#include <gtest/gtest.h>

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <new>
#include <string>
#include <vector>

#include "json_parse.h"
#include "test_util.h"

namespace {

#if LMT_HAVE_LAZYMALLOC

TEST(Identity, LibraryVersionIsTheHeaders) {
  const char* v = lazymalloc_version();
  ASSERT_NE(v, nullptr);
  EXPECT_STREQ(v, LAZYMALLOC_VERSION);
  std::string expect = std::to_string(LAZYMALLOC_VERSION_MAJOR) + "." +
                       std::to_string(LAZYMALLOC_VERSION_MINOR) + "." +
                       std::to_string(LAZYMALLOC_VERSION_PATCH);
  EXPECT_EQ(expect, v) << "header and library disagree";
}

// Each standard entry point returns a block that lazymalloc knows.
TEST(Identity, StandardEntryPointsAreLazymalloc) {
  void* p = malloc(100);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(lazymalloc_usable_size(p), 100u);
  EXPECT_EQ(lazymalloc_usable_size(p), malloc_usable_size(p));
  free(p);

  p = calloc(10, 10);
  EXPECT_GE(lazymalloc_usable_size(p), 100u);
  p = realloc(p, 5000);
  EXPECT_GE(lazymalloc_usable_size(p), 5000u);
  free(p);

  p = aligned_alloc(256, 300);
  EXPECT_GE(lazymalloc_usable_size(p), 300u);
  free(p);
  ASSERT_EQ(posix_memalign(&p, 64, 1000), 0);
  EXPECT_GE(lazymalloc_usable_size(p), 1000u);
  free(p);
  p = memalign(128, 77);
  EXPECT_GE(lazymalloc_usable_size(p), 77u);
  free(p);
  p = valloc(10);
  EXPECT_GE(lazymalloc_usable_size(p), 10u);
  free(p);
  p = pvalloc(10);
  EXPECT_GE(lazymalloc_usable_size(p), 10u);
  free(p);
  p = reallocarray(nullptr, 30, 10);
  EXPECT_GE(lazymalloc_usable_size(p), 300u);
  free(p);

  p = ::operator new(100);
  EXPECT_GE(lazymalloc_usable_size(p), 100u);
  ::operator delete(p);
  p = ::operator new[](200, std::align_val_t{512});
  EXPECT_GE(lazymalloc_usable_size(p), 200u);
  ::operator delete[](p, std::align_val_t{512});

  // The prefixed API and the standard names are the same heap.
  p = lazymalloc_malloc(123);
  EXPECT_EQ(malloc_usable_size(p), lazymalloc_usable_size(p));
  free(p);
  p = malloc(321);
  lazymalloc_free(p);
  EXPECT_EQ(lazymalloc_usable_size(nullptr), 0u);
}

// Memory that glibc allocates internally (through its PLT call to malloc)
// and the program frees must also be lazymalloc's, or free() would crash.
TEST(Identity, LibcInternalAllocationsAreLazymalloc) {
  char* s = strdup("hello lazymalloc");
  ASSERT_NE(s, nullptr);
  EXPECT_GE(lazymalloc_usable_size(s), strlen(s) + 1);
  free(s);

  s = strndup("abcdefghijklmnopqrstuvwxyz", 10);
  EXPECT_GE(lazymalloc_usable_size(s), 11u);
  free(s);

  char* a = nullptr;
  ASSERT_GT(asprintf(&a, "%0500d", 7), 0);
  EXPECT_GE(lazymalloc_usable_size(a), 501u);
  free(a);

  char* cwd = getcwd(nullptr, 0);
  ASSERT_NE(cwd, nullptr);
  EXPECT_GE(lazymalloc_usable_size(cwd), strlen(cwd) + 1);
  free(cwd);

  char* rp = realpath("/proc/self/exe", nullptr);
  ASSERT_NE(rp, nullptr);
  EXPECT_GE(lazymalloc_usable_size(rp), strlen(rp) + 1);
  free(rp);

  char* buf = nullptr;
  size_t cap = 0;
  FILE* f = fopen("/proc/self/status", "r");
  ASSERT_NE(f, nullptr);
  ssize_t len = getline(&buf, &cap, f);
  ASSERT_GT(len, 0);
  EXPECT_GE(lazymalloc_usable_size(buf), static_cast<size_t>(len) + 1);
  free(buf);
  fclose(f);

  char* ms = nullptr;
  size_t mslen = 0;
  FILE* m = open_memstream(&ms, &mslen);
  ASSERT_NE(m, nullptr);
  for (int i = 0; i < 1000; ++i) fprintf(m, "line %d\n", i);
  fclose(m);
  EXPECT_GE(lazymalloc_usable_size(ms), mslen + 1);
  free(ms);
}

TEST(Identity, StatGet) {
  uint64_t v = 12345;
  errno = 0;
  EXPECT_EQ(lazymalloc_stat_get("no_such_statistic_xyz", &v), -1);
  EXPECT_EQ(errno, ENOENT);

  // Every statistic in the JSON output ({"pid":..,..,"stats":{..},...})
  // can be read by its name, and the allocations above show up in them.
  std::vector<void*> keep;
  for (int i = 0; i < 1000; ++i) keep.push_back(malloc(64 + i));
  size_t need = lazymalloc_stats_write(nullptr, 0, 1);
  ASSERT_GT(need, 2u);
  // Counters move between the calls (the background thread's wake-ups), so
  // the second length may differ by a few digits: room to spare.
  std::string json(need + 4096, '\0');
  size_t got = lazymalloc_stats_write(json.data(), json.size(), 1);
  ASSERT_LT(got, json.size());
  EXPECT_LT(got > need ? got - need : need - got, 256u);
  json.resize(got);
  lmt::ParsedJson r = lmt::ParseJson(json);
  ASSERT_TRUE(r.ok()) << r.error << "\n" << json;
  ASSERT_TRUE(r.value.is_object()) << json;
  ASSERT_TRUE(r.value.contains("stats") && r.value["stats"].is_object())
      << "no \"stats\" object in the JSON output:\n" << json;
  size_t stats_seen = 0;
  uint64_t sum = 0;
  for (const auto& [name, value] : r.value["stats"].items()) {
    ++stats_seen;
    EXPECT_TRUE(value.is_number_unsigned()) << name << ": " << value;
    uint64_t val = 0;
    errno = 0;
    EXPECT_EQ(lazymalloc_stat_get(name.c_str(), &val), 0)
        << "lazymalloc_stat_get(\"" << name << "\") failed, errno " << errno;
    sum += val;
  }
  EXPECT_GT(stats_seen, 5u) << "hardly any statistic in the JSON output:\n" << json;
  EXPECT_GT(sum, 0u) << "every statistic is zero after 1000 allocations";
  // So can every row of "held" (where the bytes are); the 1000 live blocks
  // are in use.
  ASSERT_TRUE(r.value.contains("held") && r.value["held"].is_object()) << json;
  size_t held_seen = 0;
  for (const auto& [name, value] : r.value["held"].items()) {
    ++held_seen;
    uint64_t val = 0;
    EXPECT_EQ(lazymalloc_stat_get(name.c_str(), &val), 0) << "lazymalloc_stat_get(\"" << name << "\")";
  }
  EXPECT_GT(held_seen, 5u) << json;
  uint64_t in_use = 0;
  ASSERT_EQ(lazymalloc_stat_get("small_in_use", &in_use), 0);
  EXPECT_GE(in_use, 64u * 1000) << "1000 live blocks of 64..1063 bytes";

  lazymalloc_memory_state st{};
  lazymalloc_memory_state_get(&st);
  EXPECT_GT(st.reserved, 0u);
  EXPECT_GT(st.active, 64u * 1000) << "1000 live blocks of 64..1063 bytes";
  EXPECT_GE(st.reserved, st.active);
  for (void* p : keep) free(p);
}

#else  // standalone glibc build: nothing of lazymalloc to identify

TEST(Identity, SkippedWithoutLazymalloc) { GTEST_SKIP() << "standalone glibc build"; }

#endif

}  // namespace
