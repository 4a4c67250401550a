// The release policy alone (purge/policy.h): its judgements on a slot's
// recorded facts, with clock readings given by the test (no backend, no
// platform).
#include <gtest/gtest.h>

#include <cstdint>

#include "purge/policy.h"

namespace lazymalloc {
namespace {

namespace rp = release_policy;
constexpr uint64_t kSec = 1000000000;
constexpr uint64_t kMiB = 1 << 20;

TEST(ReleasePolicyTest, ReuseSoonAfterAPurgeDoublesTheDecayUpToTheCap) {
  // Purged at 10 s with a 1 s decay, reused 0.5 s later: too early.
  rp::Reuse r = rp::judge_reuse(0, 10 * kSec, 10 * kSec + kSec / 2, kSec);
  EXPECT_TRUE(r.premature);
  EXPECT_EQ(r.shift, 1u);
  // With shift 2 the slot waited 4 s: a reuse 3 s after the purge is still early.
  r = rp::judge_reuse(2, 10 * kSec, 13 * kSec, kSec);
  EXPECT_TRUE(r.premature);
  EXPECT_EQ(r.shift, 3u);
  // At the cap it stays there.
  r = rp::judge_reuse(kMaxDecayShift, 10 * kSec, 10 * kSec + 1, kSec);
  EXPECT_TRUE(r.premature);
  EXPECT_EQ(r.shift, kMaxDecayShift);
  // A clock reading before the purge counts as a reuse at once.
  r = rp::judge_reuse(0, 10 * kSec, 9 * kSec, kSec);
  EXPECT_TRUE(r.premature);
  EXPECT_EQ(r.shift, 1u);
}

TEST(ReleasePolicyTest, ReuseLongAfterAPurgeHalvesTheDecay) {
  // Shift 1 (2 s): a reuse within 8 x 2 s keeps it, a later one lowers it.
  rp::Reuse r = rp::judge_reuse(1, 0, 2 * kSec, kSec);
  EXPECT_FALSE(r.premature);
  EXPECT_EQ(r.shift, 1u);
  r = rp::judge_reuse(1, 0, 16 * kSec, kSec);
  EXPECT_FALSE(r.premature);
  EXPECT_EQ(r.shift, 1u);
  r = rp::judge_reuse(1, 0, 16 * kSec + 1, kSec);
  EXPECT_FALSE(r.premature);
  EXPECT_EQ(r.shift, 0u);
  // Never below 0.
  r = rp::judge_reuse(0, 0, 100 * kSec, kSec);
  EXPECT_FALSE(r.premature);
  EXPECT_EQ(r.shift, 0u);
}

TEST(ReleasePolicyTest, WaitIsLengthenedOnlyUnderHysteresisAndPinnedAtTheCap) {
  EXPECT_EQ(rp::wait_ns(0, kSec, true), kSec);
  EXPECT_EQ(rp::wait_ns(3, kSec, true), 8 * kSec);
  EXPECT_EQ(rp::wait_ns(3, kSec, false), kSec);
  EXPECT_EQ(rp::wait_ns(kMaxDecayShift, kSec, true), ~uint64_t(0));
  EXPECT_EQ(rp::wait_ns(kMaxDecayShift, kSec, false), kSec);
}

TEST(ReleasePolicyTest, DeadlineIsLengthenedUntilTheProcessTurnsIdle) {
  // Freed at 100 s, plain decay 1 s.
  EXPECT_EQ(rp::due_ns(0, 100 * kSec, kSec, true, 500 * kSec), 101 * kSec);
  EXPECT_EQ(rp::due_ns(2, 100 * kSec, kSec, false, 500 * kSec), 101 * kSec);
  // Shift 2: due at 104 s unless the process turns idle before then...
  EXPECT_EQ(rp::due_ns(2, 100 * kSec, kSec, true, 500 * kSec), 104 * kSec);
  EXPECT_EQ(rp::due_ns(2, 100 * kSec, kSec, true, 102 * kSec), 102 * kSec);
  // ...but never before plain decay.
  EXPECT_EQ(rp::due_ns(2, 100 * kSec, kSec, true, 50 * kSec), 101 * kSec);
  // Pinned: due only when the process turns idle.
  EXPECT_EQ(rp::due_ns(kMaxDecayShift, 100 * kSec, kSec, true, 300 * kSec), 300 * kSec);
  EXPECT_EQ(rp::due_ns(kMaxDecayShift, 100 * kSec, kSec, true, kNoDeadline), kNoDeadline);
}

TEST(ReleasePolicyTest, HugeBlockIsKeptWithinTheBudgetShiftedByItsHysteresis) {
  // Budget 64 MiB: 60 MiB retained plus a 4 MiB block fits, 8 MiB does not.
  EXPECT_TRUE(rp::keep_huge(0, 60 * kMiB, 4 * kMiB, 64 * kMiB));
  EXPECT_FALSE(rp::keep_huge(0, 60 * kMiB, 8 * kMiB, 64 * kMiB));
  // A range that came back soon (shift 1) earns twice the budget.
  EXPECT_TRUE(rp::keep_huge(1, 60 * kMiB, 68 * kMiB, 64 * kMiB));
  EXPECT_FALSE(rp::keep_huge(1, 60 * kMiB, 69 * kMiB, 64 * kMiB));
  // Pinned: kept whatever is retained, unless the budget is 0.
  EXPECT_TRUE(rp::keep_huge(kMaxDecayShift, ~uint64_t(0) / 2, 64 * kMiB, 1));
  EXPECT_FALSE(rp::keep_huge(kMaxDecayShift, 0, kMiB, 0));
  EXPECT_FALSE(rp::keep_huge(0, 0, kMiB, 0));
  // A budget that would overflow when shifted is unlimited.
  EXPECT_TRUE(rp::keep_huge(2, ~uint64_t(0) / 2, kMiB, ~uint64_t(0) / 2));
}

// Hugepage advice starts at the threshold with the unit slots at least half
// full, lasts while they are at least a quarter full, and the band between
// keeps the current state either way.
TEST(ReleasePolicyTest, HugepagesPayFromTheThresholdWhileTheSlotsAreDense) {
  const uint64_t threshold = 4 * kMiB, slots = 16 * kMiB;
  EXPECT_FALSE(rp::hugepages_pay(false, 3 * kMiB, 3 * kMiB, 4 * kMiB, threshold));  // small heap
  EXPECT_TRUE(rp::hugepages_pay(false, 8 * kMiB, 8 * kMiB, slots, threshold));     // half full
  EXPECT_FALSE(rp::hugepages_pay(false, 8 * kMiB, 8 * kMiB - 1, slots, threshold));
  EXPECT_FALSE(rp::hugepages_pay(false, 64 * kMiB, 6 * kMiB, slots, threshold));   // in the band: off stays off
  EXPECT_TRUE(rp::hugepages_pay(true, 64 * kMiB, 6 * kMiB, slots, threshold));     // in the band: on stays on
  EXPECT_TRUE(rp::hugepages_pay(true, 64 * kMiB, 4 * kMiB, slots, threshold));     // a quarter
  EXPECT_FALSE(rp::hugepages_pay(true, 64 * kMiB, 4 * kMiB - 1, slots, threshold));
  EXPECT_TRUE(rp::hugepages_pay(true, kMiB, kMiB, 2 * kMiB, threshold));  // below the threshold, dense: kept
  EXPECT_TRUE(rp::hugepages_pay(true, 0, 0, 0, threshold));              // nothing in unit slots
}

// A slot touched on 4 KiB pages is worth a collapse into a hugepage when
// that adds at most an eighth of it.
TEST(ReleasePolicyTest, ATouchedSlotPaysForItsCollapseWhenAtMostAnEighthIsMissing) {
  const uint64_t slot = 2 * kMiB;
  EXPECT_TRUE(rp::touched_slot_pays(slot, slot));
  EXPECT_TRUE(rp::touched_slot_pays(slot - slot / 8, slot));
  EXPECT_FALSE(rp::touched_slot_pays(slot - slot / 8 - 4096, slot));
  EXPECT_FALSE(rp::touched_slot_pays(424 * 1024, slot));  // rptest's first slot: 106 pages
  EXPECT_FALSE(rp::touched_slot_pays(0, slot));
}

}  // namespace
}  // namespace lazymalloc
