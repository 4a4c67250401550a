// The statistics are reachable: lazymalloc_stats_write() yields one valid
// JSON object (and text), also while other threads allocate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "alloc_shim.h"
#include "json_parse.h"

namespace {

// The parser must be able to fail, or the tests below prove nothing.
TEST(StatsJson, ParserRejectsBrokenJson) {
  const char* bad[] = {"",       "{",          "{\"a\":}",       "[1,]",      "{\"a\":1}x",
                       "01",     "{\"a\" 1}",  "{a:1}",          "\"\\x\"",   "{\"a\":1,}",
                       "nul",    "1.",         "-",              "[\"\t\"]",  "{\"a\":[1,2}"};
  for (const char* s : bad) EXPECT_FALSE(lmt::ParseJson(s).ok()) << "accepted: " << s;
  const char* good[] = {"{}", "{\"a\":1}", " {\"a\":[1,2.5e3,-0,true,false,null,\"x\\n\\u00e9\"]}\n",
                        "{\"v\":\"0.1.0\",\"s\":{\"x\":18446744073709551615}}"};
  for (const char* s : good) EXPECT_TRUE(lmt::ParseJson(s).ok()) << "rejected: " << s << " "
                                                                 << lmt::ParseJson(s).error;
  // Statistics are 64-bit counters: the largest must read back exactly.
  auto r = lmt::ParseJson("{\"a\":{\"b\":3,\"c\":[4]},\"x\":18446744073709551615}");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value["a"]["b"], 3);
  EXPECT_EQ(r.value["a"]["c"][0], 4);
  ASSERT_TRUE(r.value["x"].is_number_unsigned());
  EXPECT_EQ(r.value["x"].get<uint64_t>(), 18446744073709551615ull);
}

#if LMT_HAVE_LAZYMALLOC

std::string StatsString(int json) {
  size_t need = lazymalloc_stats_write(nullptr, 0, json);
  // Statistics may grow between the two calls (other threads); retry.
  for (int attempt = 0; attempt < 10; ++attempt) {
    std::string buf(need + 256, '\0');
    size_t got = lazymalloc_stats_write(buf.data(), buf.size(), json);
    if (got < buf.size()) {
      if (strlen(buf.c_str()) != got) return "<length mismatch: returned " + std::to_string(got) +
                                             ", strlen " + std::to_string(strlen(buf.c_str())) + ">";
      buf.resize(got);
      return buf;
    }
    need = got;
  }
  return "<stats output keeps growing>";
}

TEST(StatsJson, WriteReturnsOneJsonObject) {
  std::vector<void*> keep;
  for (int i = 0; i < 5000; ++i) keep.push_back(lmt::Malloc(16 + i % 2000));
  keep.push_back(lmt::Malloc(8 << 20));
  std::string json = StatsString(1);
  lmt::ParsedJson r = lmt::ParseJson(json);
  ASSERT_TRUE(r.ok()) << r.error << "\n" << json;
  EXPECT_TRUE(r.value.is_object()) << json;
  // First the process (pid, program, time), then the version.
  EXPECT_EQ(json.rfind("{\"pid\":" + std::to_string(getpid()) + ",\"program\":\"", 0), 0u) << json;
  EXPECT_NE(json.find("\",\"version\":\"" LAZYMALLOC_VERSION "\","), std::string::npos) << "version missing:\n" << json;
  ASSERT_TRUE(r.value.contains("stats") && r.value["stats"].is_object()) << json;
  size_t nonzero = 0;
  for (const auto& [name, value] : r.value["stats"].items())
    if (value.is_number() && value != 0) ++nonzero;
  EXPECT_GT(nonzero, 2u) << "hardly any non-zero statistic with 5000 live blocks:\n" << json;
  for (void* p : keep) lmt::Free(p);
}

TEST(StatsJson, TruncationIsLikeSnprintf) {
  std::string full = StatsString(1);
  ASSERT_GT(full.size(), 20u);
  char small[16];
  memset(small, 'Z', sizeof small);
  size_t n = lazymalloc_stats_write(small, 10, 1);
  EXPECT_GE(n, 20u) << "must return the full length";
  EXPECT_EQ(small[9], '\0') << "must NUL-terminate within len";
  EXPECT_EQ(strlen(small), 9u);
  EXPECT_EQ(std::string(small), full.substr(0, 9));
  EXPECT_EQ(small[10], 'Z') << "wrote past len";
  char one = 'Z';
  lazymalloc_stats_write(&one, 1, 1);
  EXPECT_EQ(one, '\0');
}

TEST(StatsJson, TextFormIsNonEmpty) {
  std::string text = StatsString(0);
  EXPECT_GT(text.size(), 50u) << text;
  // The first line names this process: pid, program and time.
  const std::string head = "lazymalloc " LAZYMALLOC_VERSION " statistics: pid " + std::to_string(getpid()) + ", program ";
  EXPECT_EQ(text.rfind(head, 0), 0u) << text;
  EXPECT_NE(text.find(", time 20"), std::string::npos) << text;
  EXPECT_FALSE(lmt::ParseJson(text).ok()) << "text form should not be the JSON form";
}

TEST(StatsJson, ValidWhileOtherThreadsAllocate) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> work{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&stop, &work, t] {
      std::vector<void*> v;
      uint64_t i = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        ++i;
        work.fetch_add(1, std::memory_order_relaxed);
        v.push_back(lmt::Malloc((i * 131 + t) % 5000 + 1));
        if (i % 1000 == 0) v.push_back(lmt::Malloc(3 << 20));
        if (v.size() > 3000) {
          for (void* p : v) lmt::Free(p);
          v.clear();
        }
      }
      for (void* p : v) lmt::Free(p);
    });
  const size_t rounds = lmt::Scaled(300, 20);
  std::string failure;
  // Read while the threads really run: at least `rounds` reads and until
  // they have done a fair amount of allocation.
  const uint64_t min_work = lmt::Scaled(300000, 1000);
  for (size_t i = 0; (i < rounds || work.load() < min_work) && failure.empty(); ++i) {
    std::string json = StatsString(1);
    lmt::ParsedJson r = lmt::ParseJson(json);
    if (!r.ok() || !r.value.is_object()) failure = "round " + std::to_string(i) + ": " + r.error + "\n" + json;
  }
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(failure, "");
}

#endif  // LMT_HAVE_LAZYMALLOC

}  // namespace
