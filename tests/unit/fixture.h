// A backend and a purger over a fake platform, with the options a test sets
// restored afterwards: the common ground of the backend and engine tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "backend/backend.h"
#include "core/options.h"
#include "fake_platform.h"
#include "frontend/heap.h"
#include "purge/purger.h"

namespace lazymalloc::test {

inline constexpr size_t kMiB = 1 << 20;

// A statistic of the process-wide allocator (lm_*), by name.
inline uint64_t lm_stat(const char* name) {
  uint64_t v = ~uint64_t(0);
  EXPECT_EQ(lm_stat_get(name, &v), 0) << name;
  return v;
}

class PurgeFixture : public ::testing::Test {
 protected:
  explicit PurgeFixture(int64_t policy) : policy_(policy) {}

  void SetUp() override {
    for (unsigned i = 0; i < kOptionCount; ++i) saved_[i] = g_option_values[i].load();
    stats = std::make_unique<Stats>();
    backend = std::make_unique<Backend>();
    backend->init(fake.get(), stats.get(), 64 * kMiB, false);
    purger = std::make_unique<Purger>();
    purger->init(backend.get(), fake.get(), stats.get());
    set(Opt::background, 1);  // the default (isolation.cc turns it off for lm_*)
    set(Opt::decay_ms, 1000);
    set(Opt::partial_decay_ms, 4000);
    set(Opt::purge, policy_);
    set(Opt::purge_advice, kAdviceAuto);
    set(Opt::purge_batch, 8 * kMiB);
    set(Opt::lazy_decay_ms, 10000);
    set(Opt::background_interval_ms, 100);
    // Pressure checked every 250 ms whenever any free memory is held.
    set(Opt::pressure_interval_ms, 250);
    set(Opt::pressure_bytes, 64 * 1024);
  }
  void TearDown() override {
    for (unsigned i = 0; i < kOptionCount; ++i) g_option_values[i].store(saved_[i]);
  }
  void set(Opt o, int64_t v) { ASSERT_TRUE(option_set(unsigned(o), v)); }
  uint64_t st(Stat s) const { return stats->get(s); }

  FakePlatform fake;
  std::unique_ptr<Stats> stats;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Purger> purger;

 private:
  int64_t policy_;
  int64_t saved_[kOptionCount];
};

}  // namespace lazymalloc::test
