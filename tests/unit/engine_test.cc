// The release engine against a fake platform: hysteresis, pressure sources,
// soft and hard limits, vectored advice.
#include <gtest/gtest.h>

#include <memory>

#include "backend/backend.h"
#include "core/options.h"
#include "fixture.h"
#include "purge/pressure.h"
#include "purge/purger.h"

namespace lazymalloc {
namespace {

using test::kMiB;

class EngineTest : public test::PurgeFixture {
 protected:
  EngineTest() : PurgeFixture(kPurgeAdaptive) {}
};

TEST_F(EngineTest, RefaultsLengthenDecayThenPin) {
  // Keep the process "active" so hysteresis applies: another block churns.
  Span* busy = backend->alloc(64 * 1024, 16);
  auto touch = [&] {
    backend->release(busy);
    busy = backend->alloc(64 * 1024, 16);
  };
  // Purged after 1 s, reused at once: a refault.
  Span* s = backend->alloc(2 * kMiB, 16);
  char* where = s->start;
  backend->release(s);
  fake.advance_ms(1100);
  touch();
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  s = backend->alloc(2 * kMiB, 16);
  ASSERT_EQ(s->start, where);
  EXPECT_EQ(st(Stat::refaults), 1u);
  EXPECT_EQ(s->slot->decay_shift, 1u);
  // Now it waits 2 s: at 1.1 s the purge is suppressed and counted.
  backend->release(s);
  fake.advance_ms(1100);
  touch();
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 0u);
  EXPECT_EQ(st(Stat::purges_suppressed), 1u);
  fake.advance_ms(1000);
  touch();
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  // Keep refaulting: the shift climbs to the cap, where decay never purges.
  for (int i = 0; i < 10; ++i) {
    s = backend->alloc(2 * kMiB, 16);
    ASSERT_EQ(s->start, where);
    backend->release(s);
    fake.advance_ms(uint64_t(1000) << s->slot->decay_shift);
    touch();
    purger->decay_pass(fake.now_ns);
  }
  s = backend->alloc(2 * kMiB, 16);
  ASSERT_EQ(s->start, where);
  EXPECT_EQ(s->slot->decay_shift, kMaxDecayShift);
  backend->release(s);
  size_t calls = fake.calls.size();
  for (int i = 0; i < 5; ++i) {
    fake.advance_ms(30000);
    touch();
    purger->decay_pass(fake.now_ns);
  }
  EXPECT_EQ(fake.calls.size(), calls) << "a pinned slot is not purged while the process is busy";
  // Pressure still takes it.
  EXPECT_GE(purger->relieve(~uint64_t(0)), 2 * kMiB);
  backend->release(busy);
}

TEST_F(EngineTest, IdleProcessIgnoresHysteresis) {
  Span* s = backend->alloc(2 * kMiB, 16);
  char* where = s->start;
  s->slot->decay_shift = kMaxDecayShift;  // pinned by earlier refaults
  backend->release(s);
  fake.advance_ms(1100);  // nothing else happened for 1.1 s: the process is idle
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  ASSERT_FALSE(fake.calls.empty());
  EXPECT_EQ(fake.calls.back().addr, reinterpret_cast<uintptr_t>(where));
}

TEST_F(EngineTest, DecayPolicyHasNoHysteresis) {
  set(Opt::purge, kPurgeDecay);
  Span* busy = backend->alloc(64 * 1024, 16);
  Span* s = backend->alloc(2 * kMiB, 16);
  s->slot->decay_shift = 3;
  backend->release(s);
  fake.advance_ms(1100);
  backend->release(busy);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
}

TEST_F(EngineTest, SoftLimitPurgesOldestFirstWithDontneed) {
  Span* a = backend->alloc(8 * kMiB, 16);
  Span* fence = backend->alloc(2 * kMiB, 16);
  Span* b = backend->alloc(8 * kMiB, 16);
  char* a_start = a->start;
  backend->release(a);
  fake.advance_ms(10);
  backend->release(b);
  set(Opt::memory_limit, 12 * kMiB);  // held: 2 active + 16 retained = 18 MiB
  purger->after_release(fake.now_ns, true);
  EXPECT_EQ(st(Stat::pressure_events_limit), 1u);
  EXPECT_LE(purger->footprint(), 12 * kMiB);
  ASSERT_FALSE(fake.calls.empty());
  EXPECT_EQ(fake.calls.front().advice, Advice::kDontNeed);
  EXPECT_EQ(fake.calls.front().addr, reinterpret_cast<uintptr_t>(a_start));  // the older one
  EXPECT_GE(st(Stat::pressure_purged_bytes), 6 * kMiB);
  backend->release(fence);
}

TEST_F(EngineTest, HardLimitRefusesAllocationsBeyondIt) {
  backend->set_hard_limit(4 * kMiB);
  Span* a = backend->alloc(2 * kMiB, 16);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(backend->alloc(4 * kMiB, 16), nullptr);
  EXPECT_EQ(st(Stat::limit_failures), 1u);
  Span* b = backend->alloc(2 * kMiB, 16);
  EXPECT_NE(b, nullptr);
  EXPECT_FALSE(backend->resize(b, 3 * kMiB));
  backend->release(a);
  EXPECT_TRUE(backend->resize(b, 3 * kMiB));  // room again
  backend->release(b);
}

TEST_F(EngineTest, RelieveTakesLazyMemoryToo) {
  Span* s = backend->alloc(6 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(2000);
  purger->decay_pass(fake.now_ns);
  EXPECT_EQ(st(Stat::lazy_bytes), 6 * kMiB);
  EXPECT_EQ(purger->relieve(~uint64_t(0)), 6 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 0u);
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 6 * kMiB);
}

TEST_F(EngineTest, OneVectoredAdviceCallPerBatch) {
  // Three separate free units in three slots, all old: one batch.
  std::vector<Span*> keep, drop;
  for (int i = 0; i < 3; ++i) {
    keep.push_back(backend->alloc(kUnitSize, 16));
    drop.push_back(backend->alloc(kUnitSize, 16));
    keep.push_back(backend->alloc(31 * kUnitSize, 16));  // fill the slot
  }
  for (Span* d : drop) backend->release(d);
  fake.advance_ms(5000);
  fake.calls.clear();
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 3 * kUnitSize);
  EXPECT_EQ(fake.calls.size(), 3u);
  EXPECT_EQ(fake.advise_calls, 1u);
  for (Span* k : keep) backend->release(k);
}

TEST_F(EngineTest, AutoAdviceUsesDontneedInsideALimitedCgroup) {
  fake.files["/proc/self/cgroup"] = "0::/app.slice/svc\n";
  fake.files["/sys/fs/cgroup/app.slice/svc/memory.max"] = "536870912\n";
  fake.files["/sys/fs/cgroup/app.slice/svc/memory.high"] = "max\n";
  fake.files["/sys/fs/cgroup/app.slice/svc/memory.current"] = "100000000\n";
  fake.files["/sys/fs/cgroup/app.slice/svc/memory.pressure"] =
      "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  fake.files["/proc/meminfo"] = "MemTotal: 1000000 kB\nMemFree: 500000 kB\nMemAvailable: 600000 kB\n";
  purger->init_pressure();
  EXPECT_EQ(st(Stat::cgroup_limit_bytes), 536870912u);
  EXPECT_EQ(st(Stat::pressure_psi_active), 1u);
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(1100);
  purger->tick(fake.now_ns);
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 2 * kMiB);
  EXPECT_EQ(fake.advised_bytes(Advice::kFree), 0u);
}

TEST_F(EngineTest, PressureSourcesTriggerRelief) {
  fake.files["/proc/self/cgroup"] = "12:memory:/jobs/7\n0::/\n";
  fake.files["/sys/fs/cgroup/memory/jobs/7/memory.limit_in_bytes"] = "100000000\n";
  fake.files["/sys/fs/cgroup/memory/jobs/7/memory.usage_in_bytes"] = "50000000\n";
  fake.files["/proc/meminfo"] = "MemTotal: 1000000 kB\nMemAvailable: 600000 kB\n";
  purger->init_pressure();
  EXPECT_EQ(st(Stat::cgroup_limit_bytes), 100000000u);
  EXPECT_EQ(st(Stat::pressure_psi_active), 0u);  // no PSI file: degraded, reported
  Span* a = backend->alloc(6 * kMiB, 16);
  backend->release(a);
  fake.advance_ms(300);
  purger->tick(fake.now_ns);  // nothing wrong yet, nothing decayed
  EXPECT_TRUE(fake.calls.empty());
  // The cgroup is at 95% of its limit: relief down to 85%.
  fake.files["/sys/fs/cgroup/memory/jobs/7/memory.usage_in_bytes"] = "95000000\n";
  fake.advance_ms(300);
  purger->tick(fake.now_ns);
  EXPECT_EQ(st(Stat::pressure_events_cgroup), 1u);
  EXPECT_GE(fake.advised_bytes(Advice::kDontNeed), 6 * kMiB);
  // MemAvailable low.
  Span* b = backend->alloc(4 * kMiB, 16);
  backend->release(b);
  fake.files["/sys/fs/cgroup/memory/jobs/7/memory.usage_in_bytes"] = "50000000\n";
  fake.files["/proc/meminfo"] = "MemTotal: 1000000 kB\nMemAvailable: 20000 kB\n";
  fake.advance_ms(300);
  purger->tick(fake.now_ns);
  EXPECT_EQ(st(Stat::pressure_events_meminfo), 1u);
  EXPECT_EQ(st(Stat::retained_bytes), 0u);
  EXPECT_EQ(st(Stat::pressure_events_psi), 0u);
}

TEST_F(EngineTest, PsiStallTimeTriggersReliefOfEverythingFree) {
  const char* psi = "/proc/pressure/memory";
  fake.files[psi] = "some avg10=0.00 avg60=0.00 avg300=0.00 total=5000000\n";
  purger->init_pressure();
  EXPECT_EQ(st(Stat::pressure_psi_active), 1u);
  Span* c = backend->alloc(2 * kMiB, 16);
  backend->release(c);
  // 300 ms later, 10 ms more of stall (3%): no pressure.
  fake.advance_ms(300);
  fake.files[psi] = "some avg10=1.00 avg60=0.00 avg300=0.00 total=5010000\n";
  purger->tick(fake.now_ns);
  EXPECT_EQ(st(Stat::pressure_events_psi), 0u);
  EXPECT_EQ(st(Stat::retained_bytes), 2 * kMiB);
  // Then 300 ms with 60 ms of stall (20%): everything free goes.
  fake.advance_ms(300);
  fake.files[psi] = "some avg10=9.00 avg60=1.00 avg300=0.00 total=5070000\n";
  purger->tick(fake.now_ns);
  EXPECT_EQ(st(Stat::pressure_events_psi), 1u);
  EXPECT_EQ(st(Stat::retained_bytes) + st(Stat::lazy_bytes), 0u);
}

TEST_F(EngineTest, NeverPolicyIgnoresPressure) {
  set(Opt::purge, kPurgeNever);
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  EXPECT_EQ(purger->relieve(~uint64_t(0)), 0u);
  EXPECT_TRUE(fake.calls.empty());
}

TEST(PressureParsers, ProcCgroupLimitsAndMeminfo) {
  char path[128];
  EXPECT_EQ(parse_proc_cgroup("0::/user.slice/session-3.scope\n", path, sizeof path), 2);
  EXPECT_STREQ(path, "/user.slice/session-3.scope");
  EXPECT_EQ(parse_proc_cgroup("4:cpu,cpuacct:/a\n3:memory:/b/c\n0::/\n", path, sizeof path), 1);
  EXPECT_STREQ(path, "/b/c");
  EXPECT_EQ(parse_proc_cgroup("5:cpuset:/x\n", path, sizeof path), 0);
  EXPECT_EQ(parse_limit("max\n"), 0u);
  EXPECT_EQ(parse_limit("1048576\n"), 1048576u);
  EXPECT_EQ(parse_limit("9223372036854771712\n"), 0u);  // v1 "unlimited"
  uint64_t v = 0;
  EXPECT_TRUE(parse_meminfo("MemTotal:  2048 kB\nMemAvailable:   1024 kB\n", "MemAvailable", &v));
  EXPECT_EQ(v, 1024u * 1024);
  EXPECT_FALSE(parse_meminfo("MemTotal:  2048 kB\n", "MemAvailable", &v));
  EXPECT_FALSE(parse_meminfo("MemTotalX: 1 kB\n", "MemTotal", &v));
  EXPECT_TRUE(parse_psi_some_total("some avg10=0.12 avg60=0.00 avg300=0.00 total=4242\nfull total=1\n", &v));
  EXPECT_EQ(v, 4242u);
  EXPECT_FALSE(parse_psi_some_total("full avg10=0.00 total=7\n", &v));
  EXPECT_TRUE(parse_status_live_threads("Name:\tx\nState:\tS (sleeping)\nThreads:\t3\n", &v));
  EXPECT_EQ(v, 3u);
  EXPECT_TRUE(parse_status_live_threads("Name:\tx\nState:\tZ (zombie)\nThreads:\t2\n", &v));
  EXPECT_EQ(v, 1u);
  EXPECT_FALSE(parse_status_live_threads("Name:\tx\n", &v));
}

}  // namespace
}  // namespace lazymalloc
