// The backend and the purger against a fake platform: page states, decay,
// batching, advice fallback and failure handling, all with a manual clock.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <tuple>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/options.h"
#include "fixture.h"
#include "purge/purger.h"

namespace lazymalloc {
namespace {

using test::kMiB;

class BackendTest : public test::PurgeFixture {
 protected:
  BackendTest() : PurgeFixture(kPurgeDecay) {}

  // Hugepage advice the fake recorded since the last call (from `seen_`):
  // (address, length, huge); only the MADV_HUGEPAGE calls with `huge_only`.
  using HugeAdvice = std::vector<std::tuple<uintptr_t, size_t, bool>>;
  HugeAdvice advice_since(bool huge_only = false) {
    HugeAdvice out;
    for (size_t i = seen_; i < fake.hugepage_advice.size(); ++i) {
      const auto& c = fake.hugepage_advice[i];
      if (c.huge || !huge_only) out.emplace_back(reinterpret_cast<uintptr_t>(c.addr), c.len, c.huge);
    }
    seen_ = fake.hugepage_advice.size();
    return out;
  }
  void skip_advice() { seen_ = fake.hugepage_advice.size(); }

  size_t seen_ = 0;
};

TEST_F(BackendTest, UnitSpansAreAlignedMappedAndFreshMemoryIsZero) {
  Span* s = backend->alloc(200 * 1024, 16);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->bytes, 4 * kUnitSize);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s->start) % kUnitSize, 0u);
  EXPECT_TRUE(s->zero);
  for (size_t off = 0; off < s->bytes; off += 4096) EXPECT_EQ(backend->span_of(s->start + off), s);
  EXPECT_EQ(backend->span_of(s->start + s->bytes), nullptr);  // next unit is free
  EXPECT_TRUE(backend->owns_address(s->start));
  int local;
  EXPECT_FALSE(backend->owns_address(&local));
  EXPECT_EQ(backend->span_of(&local), nullptr);
  EXPECT_EQ(st(Stat::active_bytes), s->bytes);
  EXPECT_EQ(st(Stat::reserved_bytes), 64 * kMiB);
  EXPECT_EQ(st(Stat::clean_bytes), 64 * kMiB - s->bytes);
  backend->release(s);
  EXPECT_EQ(st(Stat::active_bytes), 0u);
  EXPECT_EQ(st(Stat::retained_bytes), 4 * kUnitSize);
}

// The timeline page (lazymalloc-run --timeline) carries the gauges as they
// are after every operation that changes them: allocation, release, purge;
// a fork child stops publishing.
TEST_F(BackendTest, TimelinePageFollowsTheGauges) {
  alignas(64) static TimelinePage page;
  page.magic = TimelinePage::kMagic;
  TimelinePage::Gauges g{};
  auto expect_current = [&](const char* when) {
    ASSERT_TRUE(page.load(&g)) << when;
    EXPECT_EQ(g.active, st(Stat::active_bytes)) << when;
    EXPECT_EQ(g.retained, st(Stat::retained_bytes)) << when;
    EXPECT_EQ(g.lazy, st(Stat::lazy_bytes)) << when;
    EXPECT_EQ(g.clean, st(Stat::clean_bytes)) << when;
    EXPECT_EQ(g.reserved, st(Stat::reserved_bytes)) << when;
  };
  backend->set_timeline(&page);
  expect_current("at once");
  EXPECT_EQ(g.publishes, 1u);
  Span* s = backend->alloc(4 * kMiB, 16);
  ASSERT_NE(s, nullptr);
  expect_current("after alloc");
  EXPECT_EQ(g.active, 4 * kMiB);
  backend->release(s);
  expect_current("after release");
  EXPECT_EQ(g.active, 0u);
  EXPECT_EQ(g.retained, 4 * kMiB);
  fake.advance_ms(2000);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 4 * kMiB);
  expect_current("after the decay purge");
  EXPECT_EQ(g.retained, 0u);
  const uint64_t publishes = g.publishes;
  backend->fork_child();
  backend->release(backend->alloc(kUnitSize, 16));
  ASSERT_TRUE(page.load(&g));
  EXPECT_EQ(g.publishes, publishes) << "a fork child must not write its parent's page";
  backend->set_timeline(nullptr);
}

TEST_F(BackendTest, SmallSpansOfAWholeSlotAreUnitRuns) {
  // A 256 KiB size class takes a 32-unit span: still a unit run (not a huge
  // block), released as one.
  Span* s = backend->alloc_units_span(32);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->nslots, 0u);
  EXPECT_EQ(s->nunits, 32u);
  s->kind = SpanKind::kSmall;  // as the frontend does
  backend->release(s);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  EXPECT_EQ(st(Stat::active_bytes), 0u);
  EXPECT_EQ(backend->alloc_units_span(33), nullptr);
  Span* h = backend->alloc(2 * kMiB, 16);
  h->kind = SpanKind::kSmall;  // relabelled or not, a slot run is released as one
  backend->release(h);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

TEST_F(BackendTest, ReuseOfRetainedMemoryIsNotZeroAndIsCounted) {
  Span* a = backend->alloc(kUnitSize, 16);
  char* where = a->start;
  backend->release(a);
  Span* b = backend->alloc(kUnitSize, 16);
  EXPECT_EQ(b->start, where);  // first fit reuses the hot unit
  EXPECT_FALSE(b->zero);
  EXPECT_EQ(st(Stat::reuse_retained_bytes), kUnitSize);
  backend->release(b);
}

// Unit runs go where they cost the fewest CLEAN units, then into the
// smallest hole (Backend::choose_units), not into the lowest hole that fits.
TEST_F(BackendTest, UnitRunsPreferResidentUnitsThenTheSmallestHole) {
  // One slot: big [0,8), d [8,10), small [10,14), rest [14,30).
  Span* big = backend->alloc(8 * kUnitSize, 16);
  Span* d = backend->alloc(2 * kUnitSize, 16);
  Span* small = backend->alloc(4 * kUnitSize, 16);
  Span* rest = backend->alloc(16 * kUnitSize, 16);
  ASSERT_EQ(rest->slot, big->slot);
  ASSERT_EQ(rest->first_unit, 14u);
  char* small_at = small->start;
  backend->release(big);
  backend->release(small);
  // Both holes are RETAINED (and [30,32) CLEAN); the exact one wins (first
  // fit took unit 0).
  Span* a = backend->alloc(4 * kUnitSize, 16);
  EXPECT_EQ(a->start, small_at);
  EXPECT_FALSE(a->zero);
  backend->release(a);
  backend->release(d);
  backend->release(rest);
  EXPECT_EQ(backend->check_invariants(), nullptr);

  // A hole of CLEAN units with RETAINED ones at its top: the run goes to
  // the top.  keep [0,12), mid [12,28) purged while top [28,32) is live
  // (the slot went back to the free runs, and is taken again from unit 0).
  Span* keep = backend->alloc(12 * kUnitSize, 16);
  Span* mid = backend->alloc(16 * kUnitSize, 16);
  Span* top = backend->alloc(4 * kUnitSize, 16);
  ASSERT_EQ(top->slot, keep->slot);
  ASSERT_EQ(top->first_unit, 28u);
  char* top_at = top->start;
  backend->release(mid);
  EXPECT_EQ(purger->purge_all(true), 16 * kUnitSize);  // mid's units: CLEAN
  ASSERT_EQ(st(Stat::retained_bytes), 0u);
  backend->release(top);
  uint64_t clean_before = st(Stat::reuse_clean_bytes);
  Span* b = backend->alloc(4 * kUnitSize, 16);
  EXPECT_EQ(b->start, top_at) << "the RETAINED end of the hole, not its CLEAN start";
  EXPECT_EQ(st(Stat::reuse_clean_bytes), clean_before);
  EXPECT_FALSE(b->zero);
  // The CLEAN hole still serves a run that needs one, from its low end.
  Span* c = backend->alloc(8 * kUnitSize, 16);
  EXPECT_EQ(c->slot, keep->slot);
  EXPECT_EQ(c->first_unit, 12u);
  EXPECT_TRUE(c->zero);
  EXPECT_EQ(st(Stat::reuse_clean_bytes), clean_before + 8 * kUnitSize);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  backend->release(b);
  backend->release(c);
  backend->release(keep);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// A slot whose every span went back leaves the partial list for the free
// runs with its units RETAINED; a span needs no CLEAN unit of a partial
// slot while it waits there (Backend::choose_free_resident; issue #16,
// xmalloc: 21 spans went into the top slot's CLEAN units, 1.3 MiB more
// resident, while a drained slot's 2 MiB waited RETAINED).
TEST_F(BackendTest, ASpanGoesToAWhollyFreeResidentSlotBeforeCleanUnits) {
  // Slots 0-2 full of one-unit spans, slot 3 with two.
  std::vector<Span*> slots[4];
  for (int k = 0; k < 3; ++k)
    for (unsigned u = 0; u < kUnitsPerSlot; ++u) slots[k].push_back(backend->alloc_units_span(1));
  for (int u = 0; u < 2; ++u) slots[3].push_back(backend->alloc_units_span(1));
  for (int k = 1; k < 4; ++k) {
    ASSERT_EQ(slots[k][0]->slot, slots[0][0]->slot + k);
    ASSERT_EQ(slots[k].back()->slot, slots[k][0]->slot);
  }
  // Slots 0 and 2 go back and are purged (CLEAN); then slot 1 goes back
  // RETAINED, in the middle of the free run 0-2.
  for (int k : {0, 2})
    for (Span* s : slots[k]) backend->release(s);
  EXPECT_EQ(purger->purge_all(true), 2 * kSlotSize);
  for (Span* s : slots[1]) backend->release(s);
  ASSERT_EQ(st(Stat::retained_bytes), kSlotSize);
  EXPECT_EQ(backend->check_invariants(), nullptr);

  // Slot 3 has 30 CLEAN units; the spans go to slot 1's RETAINED ones.
  const uint64_t clean_before = st(Stat::reuse_clean_bytes);
  std::vector<Span*> again;
  for (unsigned u = 0; u < kUnitsPerSlot; ++u) {
    Span* s = backend->alloc_units_span(1);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->slot, slots[1][0]->slot) << "span " << u;
    EXPECT_FALSE(s->zero);
    again.push_back(s);
  }
  EXPECT_EQ(st(Stat::reuse_clean_bytes), clean_before);
  EXPECT_EQ(st(Stat::retained_bytes), 0u);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  // Nothing resident is left free: the next span takes slot 3's CLEAN units.
  Span* next = backend->alloc_units_span(1);
  EXPECT_EQ(next->slot, slots[3][0]->slot);
  EXPECT_TRUE(next->zero);
  again.push_back(next);
  for (Span* s : again) backend->release(s);
  for (Span* s : slots[3]) backend->release(s);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// A large block may run from the top of one unit slot into the bottom of
// the next; a small span never does, and such a block keeps its size.
TEST_F(BackendTest, LargeBlocksRunAcrossASlotBoundary) {
  Span* low = backend->alloc(16 * kUnitSize, 16);   // slot 0 [0,16)
  Span* low2 = backend->alloc(12 * kUnitSize, 16);  // slot 0 [16,28)
  Span* first = backend->alloc(8 * kUnitSize, 16);  // no room: slot 1 [0,8)
  Span* fill = backend->alloc(16 * kUnitSize, 16);  // slot 1 [8,24)
  Span* fill2 = backend->alloc(8 * kUnitSize, 16);  // slot 1 [24,32)
  ASSERT_EQ(low2->slot, low->slot);
  ASSERT_EQ(first->slot, low->slot + 1);
  ASSERT_EQ(fill->slot, first->slot);
  ASSERT_EQ(fill2->slot, first->slot);
  ASSERT_EQ(fill2->first_unit, 24u);
  backend->release(first);  // free: slot 0 [28,32) and slot 1 [0,8)
  uint64_t reserved = st(Stat::reserved_bytes);
  uint64_t clean_before = st(Stat::reuse_clean_bytes);
  Span* across = backend->alloc(12 * kUnitSize, 16);
  ASSERT_NE(across, nullptr);
  EXPECT_EQ(across->slot, low->slot);
  EXPECT_EQ(across->first_unit, 28u);
  EXPECT_EQ(across->nunits, 12u);
  EXPECT_EQ(across->start, low->start + 28 * kUnitSize);
  EXPECT_FALSE(across->zero);  // 8 of its units were RETAINED
  EXPECT_EQ(st(Stat::reuse_clean_bytes) - clean_before, 4 * kUnitSize);
  EXPECT_EQ(st(Stat::reserved_bytes), reserved);
  for (size_t off = 0; off < across->bytes; off += kUnitSize) EXPECT_EQ(backend->span_of(across->start + off), across);
  EXPECT_EQ(backend->span_of(across->start + across->bytes), fill);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  EXPECT_FALSE(backend->resize(across, 8 * kUnitSize));
  EXPECT_FALSE(backend->resize(across, 16 * kUnitSize));
  EXPECT_EQ(across->nunits, 12u);
  // The same hole again, for a small span: a fresh slot instead.
  backend->release(across);
  EXPECT_EQ(backend->span_of(low->start + 28 * kUnitSize), nullptr);
  EXPECT_EQ(backend->span_of(reinterpret_cast<void*>(fill->slot->base)), nullptr);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  Span* span = backend->alloc_units_span(12);
  ASSERT_NE(span, nullptr);
  EXPECT_NE(span->slot, low->slot);
  EXPECT_NE(span->slot, fill->slot);
  EXPECT_EQ(span->first_unit, 0u);
  span->kind = SpanKind::kSmall;
  backend->release(span);
  // Both slots empty out and go back to the free runs.
  backend->release(low);
  backend->release(low2);
  backend->release(fill);
  backend->release(fill2);
  EXPECT_EQ(st(Stat::active_bytes), 0u);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// Large blocks go into their owner's slots (Backend::alloc's `owner`, the
// heap's: issue #16, ninth round): a thread reuses the units it freed
// itself, not the ones another thread just wrote.  Small spans look at the
// shared slots and their heap's; another owner's slots are the last resort
// before a new arena.
TEST_F(BackendTest, LargeBlocksGoIntoTheirOwnersSlots) {
  Span* a1 = backend->alloc(16 * kUnitSize, 16, false, true, nullptr, 1);  // slot S1 [0,16)
  Span* a2 = backend->alloc(4 * kUnitSize, 16, false, true, nullptr, 1);   // S1 [16,20)
  ASSERT_NE(a1, nullptr);
  ASSERT_NE(a2, nullptr);
  ASSERT_EQ(a2->slot, a1->slot);
  ASSERT_EQ(a2->first_unit, 16u);
  SlotMeta* s1 = a1->slot;
  // Owner 2 has no slot and there is no shared one: a fresh slot, not S1's
  // free units.
  Span* b = backend->alloc(8 * kUnitSize, 16, false, true, nullptr, 2);
  ASSERT_NE(b, nullptr);
  SlotMeta* s2 = b->slot;
  EXPECT_NE(s2, s1);
  EXPECT_EQ(b->first_unit, 0u);
  // S1's first 16 units go back RETAINED; owner 2 takes CLEAN units of its
  // own slot rather than them, and owner 1 gets them back.
  char* a1_at = a1->start;
  backend->release(a1);
  const uint64_t clean_before = st(Stat::reuse_clean_bytes);
  Span* c = backend->alloc(8 * kUnitSize, 16, false, true, nullptr, 2);
  EXPECT_EQ(c->slot, s2);
  EXPECT_EQ(c->first_unit, 8u);
  EXPECT_EQ(st(Stat::reuse_clean_bytes) - clean_before, 8 * kUnitSize);
  Span* d = backend->alloc(16 * kUnitSize, 16, false, true, nullptr, 1);
  EXPECT_EQ(d->start, a1_at);
  EXPECT_FALSE(d->zero);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  // A small span of heap 2 finds no shared slot and fits into its heap's.
  Span* span = backend->alloc_units_span(4, false, 2);
  ASSERT_NE(span, nullptr);
  EXPECT_EQ(span->slot, s2);
  span->kind = SpanKind::kSmall;
  // A small span of heap 3 opens a shared slot, which a large block of an
  // owner without room of its own then fits into before a fresh slot.
  Span* shared = backend->alloc_units_span(2, false, 3);
  ASSERT_NE(shared, nullptr);
  EXPECT_NE(shared->slot, s1);
  EXPECT_NE(shared->slot, s2);
  shared->kind = SpanKind::kSmall;
  Span* e = backend->alloc(16 * kUnitSize, 16, false, true, nullptr, 3);
  EXPECT_EQ(e->slot, shared->slot);
  EXPECT_EQ(e->first_unit, 2u);
  Span* e2 = backend->alloc(14 * kUnitSize, 16, false, true, nullptr, 3);  // fills it
  EXPECT_EQ(e2->slot, shared->slot);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  // Every other slot of the arena taken and the shared one full: owner 4
  // takes room in another owner's slot (S1 [20,32), the first owner's)
  // rather than reserve a new arena.
  const uint64_t reserved = st(Stat::reserved_bytes);
  const size_t free_slots = size_t(reserved / kSlotSize) - 3;  // all but S1, S2 and the shared slot
  Span* rest = backend->alloc(free_slots * kSlotSize, 16);
  ASSERT_NE(rest, nullptr);
  ASSERT_EQ(rest->nslots, free_slots);
  Span* f = backend->alloc(12 * kUnitSize, 16, false, true, nullptr, 4);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(st(Stat::foreign_slot_runs), 1u);
  EXPECT_EQ(st(Stat::reserved_bytes), reserved);
  EXPECT_EQ(f->slot, s1);
  EXPECT_EQ(f->first_unit, 20u);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  for (Span* x : {a2, b, c, d, span, shared, e, e2, rest, f}) backend->release(x);
  EXPECT_EQ(st(Stat::active_bytes), 0u);
  EXPECT_EQ(backend->check_invariants(), nullptr);  // free slots have no owner
}

// A slot that went back whole keeps, as `freed_by`, the owner it had: of
// the resident free slots, an owner takes one of its own first, though
// another owner's went back later.
TEST_F(BackendTest, AnOwnerTakesBackAWhollyFreeSlotOfItsOwnFirst) {
  Span* x = backend->alloc(16 * kUnitSize, 16, false, true, nullptr, 2);   // slot T
  Span* x2 = backend->alloc(16 * kUnitSize, 16, false, true, nullptr, 2);  // T, full
  Span* y = backend->alloc(16 * kUnitSize, 16, false, true, nullptr, 1);   // slot U
  ASSERT_EQ(x2->slot, x->slot);
  ASSERT_NE(y->slot, x->slot);
  SlotMeta* t = x->slot;
  SlotMeta* u = y->slot;
  backend->release(x);
  backend->release(x2);
  backend->release(y);  // U went back last
  ASSERT_EQ(st(Stat::retained_bytes), 48 * kUnitSize);
  Span* z = backend->alloc(8 * kUnitSize, 16, false, true, nullptr, 2);
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->slot, t);
  EXPECT_FALSE(z->zero);
  Span* w = backend->alloc(8 * kUnitSize, 16, false, true, nullptr, 1);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->slot, u);
  EXPECT_FALSE(w->zero);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  // The same once both slots were purged MADV_FREE (LAZY): a purge keeps
  // the owner a slot went back from.
  backend->release(z);
  backend->release(w);  // U again last
  fake.advance_ms(1100);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 48 * kUnitSize);
  ASSERT_EQ(st(Stat::lazy_bytes), 48 * kUnitSize);
  Span* z2 = backend->alloc(8 * kUnitSize, 16, false, true, nullptr, 2);
  ASSERT_NE(z2, nullptr);
  EXPECT_EQ(z2->slot, t);
  EXPECT_EQ(st(Stat::reuse_lazy_bytes), 8 * kUnitSize);
  backend->release(z2);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// Backend::alloc's give_back (the large cache's evicted block): released in
// the same lock hold, before the new run is chosen, which may take its
// resident units.
TEST_F(BackendTest, AllocGivesBackABlockFirstAndMayReuseItsUnits) {
  Span* old_block = backend->alloc(8 * kUnitSize, 16);
  Span* fence = backend->alloc(4 * kUnitSize, 16);
  char* where = old_block->start;
  const uint64_t active = st(Stat::active_bytes);
  Span* fresh = backend->alloc(8 * kUnitSize, 16, false, true, old_block);
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->start, where);
  EXPECT_FALSE(fresh->zero);
  EXPECT_EQ(st(Stat::active_bytes), active);
  EXPECT_EQ(st(Stat::retained_bytes), 0u);
  EXPECT_EQ(st(Stat::reuse_retained_bytes), 8 * kUnitSize);
  EXPECT_EQ(backend->check_invariants(), nullptr);
  // Given back whatever the outcome: a request the hard limit refuses.
  backend->set_hard_limit(active);
  EXPECT_EQ(backend->alloc(16 * kUnitSize, 16, false, true, fresh), nullptr);
  EXPECT_EQ(st(Stat::active_bytes), 4 * kUnitSize);
  EXPECT_EQ(st(Stat::retained_bytes), 8 * kUnitSize);
  backend->set_hard_limit(0);
  backend->release(fence);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

TEST_F(BackendTest, HugeBlocksAreSlotRunsHonouringAlignment) {
  Span* h = backend->alloc(5 * kMiB, 16);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->kind, SpanKind::kHuge);
  EXPECT_EQ(h->bytes, 6 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h->start) % kSlotSize, 0u);
  Span* a = backend->alloc(3 * kMiB, 16 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->start) % (16 * kMiB), 0u);
  EXPECT_EQ(backend->span_of(a->start + 3 * kMiB), a);
  backend->release(a);
  backend->release(h);
  EXPECT_EQ(st(Stat::huge_blocks), 0u);
  EXPECT_EQ(st(Stat::active_bytes), 0u);
}

TEST_F(BackendTest, HugeBlocksResizeInPlaceAndFreeRunsCoalesce) {
  Span* a = backend->alloc(4 * kMiB, 16);
  Span* b = backend->alloc(4 * kMiB, 16);
  Span* c = backend->alloc(4 * kMiB, 16);
  ASSERT_EQ(b->start, a->start + 4 * kMiB);
  ASSERT_EQ(c->start, b->start + 4 * kMiB);
  EXPECT_FALSE(backend->resize(a, 6 * kMiB));  // b is in the way
  backend->release(b);
  EXPECT_TRUE(backend->resize(a, 7 * kMiB));   // grows into b's slots
  EXPECT_EQ(a->bytes, 8 * kMiB);
  EXPECT_EQ(backend->span_of(a->start + 7 * kMiB), a);
  EXPECT_TRUE(backend->resize(a, 2 * kMiB));   // shrinks, tail freed
  EXPECT_EQ(backend->span_of(a->start + 3 * kMiB), nullptr);
  char* base = a->start;
  backend->release(a);
  backend->release(c);
  // Everything coalesced: a 12 MiB block fits at the same place again.
  Span* d = backend->alloc(12 * kMiB, 16);
  EXPECT_EQ(d->start, base);
  backend->release(d);
}

TEST_F(BackendTest, LargeBlocksResizeInPlaceAndBecomeHugeWithoutMoving) {
  Span* l = backend->alloc(300 * 1024, 16, /*growing=*/true);
  ASSERT_EQ(l->kind, SpanKind::kLarge);
  EXPECT_EQ(l->first_unit, 0u);  // a growing block starts a fresh slot
  char* where = l->start;
  EXPECT_TRUE(backend->resize(l, 900 * 1024));
  EXPECT_EQ(l->bytes, 15 * kUnitSize);
  EXPECT_EQ(backend->span_of(where + 14 * kUnitSize), l);
  EXPECT_TRUE(backend->resize(l, 200 * 1024));
  EXPECT_EQ(backend->span_of(where + 5 * kUnitSize), nullptr);  // tail units freed
  EXPECT_TRUE(backend->resize(l, 5 * kMiB));                    // promoted, then grown
  EXPECT_EQ(l->kind, SpanKind::kHuge);
  EXPECT_EQ(l->start, where);
  EXPECT_EQ(l->bytes, 6 * kMiB);
  EXPECT_EQ(backend->span_of(where + 5 * kMiB), l);
  EXPECT_EQ(st(Stat::promotions), 1u);
  // Not alone in its slot: no promotion.
  Span* a = backend->alloc(128 * 1024, 16);
  Span* b = backend->alloc(128 * 1024, 16);
  ASSERT_EQ(a->slot, b->slot);
  EXPECT_FALSE(backend->resize(a, 3 * kMiB));
  EXPECT_EQ(a->kind, SpanKind::kLarge);
  backend->release(a);
  backend->release(b);
  backend->release(l);
  MemoryState m = backend->memory_state();
  EXPECT_EQ(m.active, 0u);
  EXPECT_EQ(m.retained + m.lazy + m.clean, m.reserved);
}

// A growing block (one realloc moved into the large range) opens the
// bottom slot of the largest free run, not the smallest hole that fits: the
// run's rest is its room to grow in place past its slot.  Freed, it merges
// back into that run, resident, and the next growing block starts there
// again (realloc-grow: no mremap, no fresh page each cycle).
TEST_F(BackendTest, AGrowingBlockOpensTheBottomOfTheLargestFreeRunAndTheNextOneReusesIt) {
  Span* hole = backend->alloc(2 * kMiB, 16);  // one slot
  Span* wall = backend->alloc(2 * kMiB, 16);
  ASSERT_EQ(wall->start, hole->start + 2 * kMiB);
  backend->release(hole);  // a free run of one slot, before a used one
  Span* small = backend->alloc(300 * 1024, 16);  // not growing: the smallest fit
  EXPECT_EQ(small->start, hole->start);
  backend->release(small);
  Span* l = backend->alloc(300 * 1024, 16, /*growing=*/true);
  ASSERT_EQ(l->kind, SpanKind::kLarge);
  char* where = l->start;
  EXPECT_EQ(where, wall->start + 2 * kMiB);  // past the wall: the largest run's bottom
  EXPECT_TRUE(backend->resize(l, 5 * kMiB));  // promoted, then grown in place
  EXPECT_EQ(l->start, where);
  backend->release(l);
  Span* again = backend->alloc(300 * 1024, 16, /*growing=*/true);
  EXPECT_EQ(again->start, where);
  EXPECT_FALSE(again->zero);  // the freed block's resident slot
  EXPECT_TRUE(backend->resize(again, 5 * kMiB));
  EXPECT_EQ(again->start, where);
  backend->release(again);
  backend->release(wall);
  MemoryState m = backend->memory_state();
  EXPECT_EQ(m.active, 0u);
}

TEST_F(BackendTest, NewArenasWhenFullAndENOMEMWhenTheKernelSaysNo) {
  Span* big = backend->alloc(60 * kMiB, 16);
  ASSERT_NE(big, nullptr);
  Span* more = backend->alloc(8 * kMiB, 16);  // does not fit: a second arena
  ASSERT_NE(more, nullptr);
  EXPECT_EQ(st(Stat::arenas), 2u);
  fake.fail_reserve = true;
  EXPECT_EQ(backend->alloc(200 * kMiB, 16), nullptr);
  EXPECT_GT(st(Stat::mmap_failures), 0u);
  fake.fail_reserve = false;
  backend->release(big);
  backend->release(more);
}

// Arenas start at 64 MiB (a small program's slot records fit in a page) and
// double up to arena_reserve; a request over half the next arena's size
// gets an arena of its own size, which does not count as a step.
TEST_F(BackendTest, ArenasGrowFrom64MiBToTheReserveSize) {
  backend->init(fake.get(), stats.get(), 256 * kMiB, false);
  std::vector<Span*> spans;
  auto alloc = [&](size_t bytes) {
    Span* s = backend->alloc(bytes, 16);
    EXPECT_NE(s, nullptr) << bytes;
    spans.push_back(s);
  };
  auto sizes = [&] {
    std::vector<size_t> out;
    for (const auto& r : fake.reservations) out.push_back(r.second / kMiB);
    return out;
  };
  alloc(kUnitSize);
  alloc(30 * kMiB);
  alloc(30 * kMiB);  // 31 of the 32 slots
  EXPECT_EQ(sizes(), (std::vector<size_t>{64}));
  alloc(30 * kMiB);
  EXPECT_EQ(sizes(), (std::vector<size_t>{64, 128}));
  alloc(100 * kMiB);
  EXPECT_EQ(sizes(), (std::vector<size_t>{64, 128, 256}));
  alloc(200 * kMiB);  // over half of 256 MiB: its own size
  EXPECT_EQ(sizes(), (std::vector<size_t>{64, 128, 256, 200}));
  alloc(100 * kMiB);  // into the 256 MiB arena's free slots
  EXPECT_EQ(sizes().size(), 4u);
  alloc(120 * kMiB);
  EXPECT_EQ(sizes(), (std::vector<size_t>{64, 128, 256, 200, 256}));
  for (Span* s : spans) backend->release(s);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// The page-map leaves are mapped whole (a unit leaf is 2 MiB) and count as
// metadata only by the pages that hold registered slots' entries, each
// page once, however many arenas share it; an arena's slot records count
// whole (all written).
TEST_F(BackendTest, MetadataCountsTheLeafPagesArenasWriteOnce) {
  backend->init(fake.get(), stats.get(), 256 * kMiB, false);
  std::set<uintptr_t> leaf_pages;
  uint64_t slot_records = 0;
  // What the reservations so far write: slot records and distinct pages of
  // the slot leaf (8 bytes per slot) and unit leaf (8 per unit).
  auto expected = [&] {
    leaf_pages.clear();
    slot_records = 0;
    for (const auto& [addr, len] : fake.reservations) {
      const uintptr_t first = reinterpret_cast<uintptr_t>(addr) >> kSlotShift, n = len / kSlotSize;
      slot_records += align_up(n * sizeof(SlotMeta), kOsPageSize);
      for (uintptr_t idx = first; idx < first + n; ++idx) {
        const uintptr_t leaf = idx >> 13, in = idx & ((uintptr_t(1) << 13) - 1);
        leaf_pages.insert((leaf << 20) | (in * sizeof(void*) / kOsPageSize));
        leaf_pages.insert((leaf << 20) | (1u << 19) | (in * kUnitsPerSlot * sizeof(void*) / kOsPageSize));
      }
    }
    return slot_records + leaf_pages.size() * kOsPageSize;
  };
  std::vector<Span*> spans{backend->alloc(kUnitSize, 16)};
  ASSERT_NE(spans[0], nullptr);
  ASSERT_EQ(fake.reservations.size(), 1u);
  // The arena's and span's records: one page each.
  const uint64_t records = 2 * kOsPageSize;
  EXPECT_EQ(st(Stat::metadata_bytes), expected() + records);
  EXPECT_GE(st(Stat::metadata_mapped_bytes), kPageMapLeafSize * kUnitsPerSlot * sizeof(Span*));
  for (size_t mib : {60, 100, 200, 120}) {
    spans.push_back(backend->alloc(mib * kMiB, 16));
    ASSERT_NE(spans.back(), nullptr);
    EXPECT_EQ(st(Stat::metadata_bytes), expected() + records) << fake.reservations.size() << " arenas";
  }
  EXPECT_GE(fake.reservations.size(), 3u);
  EXPECT_LT(st(Stat::metadata_bytes), st(Stat::metadata_mapped_bytes) / 4);
  for (Span* s : spans) backend->release(s);
}

// Hugepage advice: none for a small heap's arena; a huge block's own slots
// at once (once); every arena, whole, when active bytes reach the threshold,
// and later arenas when they are reserved.
TEST_F(BackendTest, HugepageAdviceStartsAtTheThresholdAndCoversHugeBlocksAtOnce) {
  set(Opt::hugepage_threshold, 8 * kMiB);
  backend->init(fake.get(), stats.get(), 64 * kMiB, true);
  auto huge_advice = [&] {
    std::vector<std::pair<uintptr_t, size_t>> out;
    for (const auto& c : fake.hugepage_advice) {
      if (c.huge) out.emplace_back(reinterpret_cast<uintptr_t>(c.addr), c.len);
    }
    return out;
  };
  Span* small = backend->alloc(kMaxLarge, 16);
  ASSERT_NE(small, nullptr);
  ASSERT_EQ(fake.reservations.size(), 1u);
  const uintptr_t arena = reinterpret_cast<uintptr_t>(fake.reservations[0].first);
  // Only the unit map's leaf, MADV_NOHUGEPAGE.
  ASSERT_EQ(fake.hugepage_advice.size(), 1u);
  EXPECT_FALSE(fake.hugepage_advice[0].huge);

  Span* h = backend->alloc(4 * kMiB, 16);  // active 5 MiB
  ASSERT_NE(h, nullptr);
  using Ranges = std::vector<std::pair<uintptr_t, size_t>>;
  const uintptr_t h_start = reinterpret_cast<uintptr_t>(h->start);
  EXPECT_EQ(huge_advice(), (Ranges{{h_start, 4 * kMiB}}));
  backend->release(h);
  h = backend->alloc(4 * kMiB, 16);  // the same slots, advised already
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h->start), h_start);
  EXPECT_EQ(huge_advice().size(), 1u);

  Span* h2 = backend->alloc(4 * kMiB, 16);  // active 9 MiB: the whole arena
  ASSERT_NE(h2, nullptr);
  EXPECT_EQ(huge_advice(), (Ranges{{h_start, 4 * kMiB}, {arena, 64 * kMiB}}));
  Span* far = backend->alloc(60 * kMiB, 16);  // an arena of its own, advised when reserved
  ASSERT_NE(far, nullptr);
  ASSERT_EQ(fake.reservations.size(), 2u);
  EXPECT_EQ(huge_advice(), (Ranges{{h_start, 4 * kMiB},
                                   {arena, 64 * kMiB},
                                   {reinterpret_cast<uintptr_t>(fake.reservations[1].first), 60 * kMiB}}));
  for (Span* s : {small, h, h2, far}) backend->release(s);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// The arenas' advice lasts while hugepages pay: a heap that frees most of
// its units, scattered, and has them purged is advised MADV_NOHUGEPAGE
// (khugepaged would collapse each slot that still holds a live unit back
// into a whole hugepage), except a huge block's own slots; filling its
// slots again above the threshold brings the advice back.
TEST_F(BackendTest, HugepageAdviceIsWithdrawnWhenPurgesLeaveTheHeapSparse) {
  set(Opt::hugepage_threshold, 8 * kMiB);
  backend->init(fake.get(), stats.get(), 64 * kMiB, true);
  fake.resident_answer = long(kSlotSize / kOsPageSize);  // the slots' pages are all touched: dense
  std::vector<Span*> units{backend->alloc(kUnitSize, 16)};
  ASSERT_NE(units[0], nullptr);
  skip_advice();  // the unit map's leaf
  for (unsigned i = 1; i < 5 * kUnitsPerSlot; ++i) {  // 10 MiB in five whole slots
    units.push_back(backend->alloc(kUnitSize, 16));
    ASSERT_NE(units.back(), nullptr);
  }
  ASSERT_EQ(fake.reservations.size(), 1u);
  const uintptr_t arena = reinterpret_cast<uintptr_t>(fake.reservations[0].first);
  EXPECT_EQ(advice_since(), (HugeAdvice{{arena, 64 * kMiB, true}}));
  EXPECT_EQ(stats->get(Stat::hugepage_advice), 1u);
  Span* h = backend->alloc(4 * kMiB, 16);  // a huge block: its slots keep their advice
  ASSERT_NE(h, nullptr);
  const uintptr_t h_start = reinterpret_cast<uintptr_t>(h->start);

  // Keep one unit in each slot: 320 KiB live over 10 MiB of unit slots.
  for (unsigned i = 0; i < units.size(); ++i) {
    if (i % kUnitsPerSlot != 0) backend->release(units[i]);
  }
  EXPECT_TRUE(advice_since().empty());  // nothing changes until a purge
  fake.advance_ms(int(option(Opt::partial_decay_ms)) + 100);  // units inside used slots
  EXPECT_GT(purger->decay_pass(fake.now_ns), 0u);
  EXPECT_EQ(advice_since(), (HugeAdvice{{arena, h_start - arena, false},
                                    {h_start + 4 * kMiB, arena + 64 * kMiB - h_start - 4 * kMiB, false}}));
  EXPECT_EQ(stats->get(Stat::hugepage_advice), 0u);
  EXPECT_EQ(stats->get(Stat::hugepage_withdrawals), 1u);

  // Refilled to 9.8 MiB over 10 MiB of unit slots: advised again, once.
  std::vector<Span*> again;
  for (unsigned i = 0; i < 5 * (kUnitsPerSlot - 1) - 2; ++i) {
    again.push_back(backend->alloc(kUnitSize, 16));
    ASSERT_NE(again.back(), nullptr);
  }
  EXPECT_EQ(advice_since(), (HugeAdvice{{arena, 64 * kMiB, true}}));
  EXPECT_EQ(stats->get(Stat::hugepage_advice), 1u);
  for (unsigned i = 0; i < units.size(); i += kUnitsPerSlot) backend->release(units[i]);
  for (Span* s : again) backend->release(s);
  backend->release(h);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// When hugepages start (issue #16): under the default threshold a dense
// heap of 12 MiB (xmalloc's and larson's peaks are 7-11 MiB active) keeps
// 4 KiB pages; a heap past the threshold whose unit slots are sparse (one
// unit left in each after a purge, a huge block making up the bytes) gets
// advice for the huge block's own slots only; the same unit slots filled
// densely bring the whole arena's advice, once.
TEST_F(BackendTest, HugepageAdviceWaitsForABigHeapWithDenseUnitSlots) {
  const int64_t threshold = kOptionInfo[unsigned(Opt::hugepage_threshold)].def;
  ASSERT_EQ(threshold, int64_t(16 * kMiB));
  set(Opt::hugepage_threshold, threshold);
  backend->init(fake.get(), stats.get(), 64 * kMiB, true);
  std::vector<Span*> units;
  for (unsigned i = 0; i < 6 * kUnitsPerSlot; ++i) {  // 12 MiB in six whole slots: dense, small
    units.push_back(backend->alloc(kUnitSize, 16));
    ASSERT_NE(units.back(), nullptr);
  }
  ASSERT_EQ(fake.reservations.size(), 1u);
  const uintptr_t arena = reinterpret_cast<uintptr_t>(fake.reservations[0].first);
  EXPECT_TRUE(advice_since(true).empty());
  EXPECT_EQ(stats->get(Stat::hugepage_advice), 0u);

  // One unit left in each slot, the rest purged: 384 KiB held over 12 MiB.
  for (unsigned i = 0; i < units.size(); ++i) {
    if (i % kUnitsPerSlot != 0) backend->release(units[i]);
  }
  fake.advance_ms(int(option(Opt::partial_decay_ms)) + 100);
  EXPECT_GT(purger->decay_pass(fake.now_ns), 0u);
  Span* h = backend->alloc(16 * kMiB, 16);  // active past the threshold, unit slots sparse
  ASSERT_NE(h, nullptr);
  ASSERT_GE(stats->get(Stat::active_bytes), uint64_t(threshold));
  const uintptr_t h_start = reinterpret_cast<uintptr_t>(h->start);
  EXPECT_EQ(advice_since(true), (HugeAdvice{{h_start, 16 * kMiB, true}}));
  EXPECT_EQ(stats->get(Stat::hugepage_advice), 0u);

  // The sparse slots filled again: half full is enough, the arena is advised whole.
  std::vector<Span*> again;
  for (unsigned i = 0; i < 3 * kUnitsPerSlot; ++i) {
    again.push_back(backend->alloc(kUnitSize, 16));
    ASSERT_NE(again.back(), nullptr);
  }
  EXPECT_EQ(advice_since(true), (HugeAdvice{{arena, 64 * kMiB, true}}));
  EXPECT_EQ(stats->get(Stat::hugepage_advice), 1u);
  for (unsigned i = 0; i < units.size(); i += kUnitsPerSlot) backend->release(units[i]);
  for (Span* s : again) backend->release(s);
  backend->release(h);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// hugepages=reused: fresh address space keeps 4 KiB pages (a hugepage
// fault on fresh memory costs 2-6 ms where the guest reports its free
// memory to the host).  A huge block on fresh slots gets no advice; freed
// and taken again while RETAINED (resident 4 KiB pages) it gets none
// either; purged (CLEAN) and taken again, its slots are advised, so that
// they fault in hugepages.  When the arenas are advised, their fresh slots
// get MADV_NOHUGEPAGE on their own, and a fresh slot opened for units
// stays so.
TEST_F(BackendTest, HugepagesReusedAdviseOnlySlotsUsedAndGivenBack) {
  set(Opt::hugepage_threshold, 8 * kMiB);
  backend->init(fake.get(), stats.get(), 64 * kMiB, kHugepagesReused);
  Span* h = backend->alloc(4 * kMiB, 16);
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(fake.reservations.size(), 1u);
  const uintptr_t arena = reinterpret_cast<uintptr_t>(fake.reservations[0].first);
  const uintptr_t h_start = reinterpret_cast<uintptr_t>(h->start);
  ASSERT_EQ(h_start, arena);
  EXPECT_TRUE(advice_since(true).empty()) << "a fresh block's slots are not advised";
  EXPECT_EQ(stats->get(Stat::hugepage_reuse_only), 2u);  // every fresh slot
  backend->release(h);  // RETAINED: resident, on 4 KiB pages
  h = backend->alloc(4 * kMiB, 16);
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(h->start), h_start);
  EXPECT_TRUE(advice_since(true).empty()) << "resident 4 KiB pages reused as they are";
  EXPECT_FALSE(h->zero);
  backend->release(h, true);  // given back: CLEAN
  h = backend->alloc(4 * kMiB, 16);
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(h->start), h_start);
  EXPECT_EQ(advice_since(true), (HugeAdvice{{h_start, 4 * kMiB, true}}));
  EXPECT_TRUE(h->zero);
  EXPECT_EQ(backend->check_invariants(), nullptr);

  // A second block brings active bytes to the threshold: the arena is
  // advised, its fresh slots (all but the first block's) are not.
  skip_advice();
  Span* h2 = backend->alloc(4 * kMiB, 16);
  ASSERT_NE(h2, nullptr);
  const uintptr_t h2_start = reinterpret_cast<uintptr_t>(h2->start);
  ASSERT_EQ(h2_start, arena + 4 * kMiB);
  EXPECT_EQ(advice_since(), (HugeAdvice{{arena, 64 * kMiB, true}, {arena + 4 * kMiB, 60 * kMiB, false}}));
  EXPECT_EQ(stats->get(Stat::hugepage_advice), 1u);
  Span* u = backend->alloc(kUnitSize, 16);  // opens a fresh slot for units
  ASSERT_NE(u, nullptr);
  EXPECT_TRUE(advice_since().empty());
  // Given back and taken again: advised.
  backend->release(h2, true);
  Span* h3 = backend->alloc(4 * kMiB, 16);
  ASSERT_NE(h3, nullptr);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(h3->start), h2_start);
  EXPECT_EQ(advice_since(), (HugeAdvice{{h2_start, 4 * kMiB, true}}));
  for (Span* s : {h, h3, u}) backend->release(s);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// hugepages=auto asks the platform once, when advice is first decided (a
// process that never gets there never asks): on a guest that reports its
// free memory to the host, fresh slots opened for small-object spans keep
// 4 KiB pages (MADV_NOHUGEPAGE on their own when the arenas are advised)
// while large and huge blocks get the advice as under `on`; elsewhere it
// is `on`.
TEST_F(BackendTest, HugepagesAutoKeepsFreshSmallSpansOnSmallPagesWhereTheHostIsToldOfFreeMemory) {
  set(Opt::hugepage_threshold, 8 * kMiB);
  fake.resident_answer = long(kSlotSize / kOsPageSize);  // touched slots are dense
  for (bool reports : {false, true}) {
    SCOPED_TRACE(reports ? "reporting guest" : "no reporting");
    fake.reports_free_pages = reports;
    fake.reporting_queries = 0;
    stats = std::make_unique<Stats>();
    backend = std::make_unique<Backend>();
    backend->init(fake.get(), stats.get(), 64 * kMiB, kHugepagesAuto);
    purger = std::make_unique<Purger>();
    purger->init(backend.get(), fake.get(), stats.get());  // sets the backend's release policy
    Span* u = backend->alloc(kMaxLarge, 16);  // half a unit slot: dense enough
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(fake.reporting_queries, 0u);
    const uintptr_t arena = reinterpret_cast<uintptr_t>(fake.reservations.back().first);
    skip_advice();
    Span* a = backend->alloc(4 * kMiB, 16);
    Span* b = backend->alloc(4 * kMiB, 16);  // 9 MiB active: the arenas' advice
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(fake.reporting_queries, 1u);
    EXPECT_EQ(stats->get(Stat::hugepage_reuse_only), reports ? 1u : 0u);
    const uintptr_t a_start = reinterpret_cast<uintptr_t>(a->start), b_start = reinterpret_cast<uintptr_t>(b->start);
    HugeAdvice advice = advice_since();
    if (reports) {
      // The fresh slots above a's: MADV_NOHUGEPAGE; b's (fresh) advised as it is taken.
      EXPECT_EQ(advice, (HugeAdvice{{a_start, 4 * kMiB, true},
                                    {arena, 64 * kMiB, true},
                                    {a_start + 4 * kMiB, arena + 64 * kMiB - a_start - 4 * kMiB, false},
                                    {b_start, 4 * kMiB, true}}));
    } else {
      EXPECT_EQ(advice, (HugeAdvice{{a_start, 4 * kMiB, true}, {arena, 64 * kMiB, true}}));
    }
    // Small spans: the first fills u's slot, the second opens a fresh one,
    // which keeps its advice (MADV_NOHUGEPAGE on a reporting guest).
    Span* s1 = backend->alloc_units_span(16);
    Span* s2 = backend->alloc_units_span(16);
    ASSERT_NE(s1, nullptr);
    ASSERT_NE(s2, nullptr);
    ASSERT_NE(reinterpret_cast<uintptr_t>(s2->start) >> kSlotShift, reinterpret_cast<uintptr_t>(u->start) >> kSlotShift);
    EXPECT_TRUE(advice_since().empty());
    // Large blocks: the first fills s2's slot, the second opens a fresh one,
    // advised on its own on a reporting guest (the arena's advice elsewhere).
    Span* l1 = backend->alloc(kMaxLarge, 16);
    Span* l2 = backend->alloc(kMaxLarge, 16);
    ASSERT_NE(l1, nullptr);
    ASSERT_NE(l2, nullptr);
    const uintptr_t l2_slot = reinterpret_cast<uintptr_t>(l2->start) & ~uintptr_t(kSlotSize - 1);
    ASSERT_NE(l2_slot, reinterpret_cast<uintptr_t>(s2->start) & ~uintptr_t(kSlotSize - 1));
    if (reports) {
      EXPECT_EQ(advice_since(), (HugeAdvice{{l2_slot, kSlotSize, true}}));
    } else {
      EXPECT_TRUE(advice_since().empty());
    }
    EXPECT_EQ(fake.reporting_queries, 1u);
    for (Span* s : {u, a, b, s1, s2, l1, l2}) backend->release(s);
    EXPECT_EQ(backend->check_invariants(), nullptr);
  }
}

// Advice for slots of their own splits the arena's mapping: under a reuse
// scope it stops at the cap (vm.max_map_count), and a slot then keeps the
// advice it has (a fresh one its 4 KiB pages).
TEST_F(BackendTest, HugepageAdviceForSlotsOfTheirOwnStopsAtItsCap) {
  set(Opt::hugepage_threshold, 8 * kMiB);
  fake.resident_answer = long(kSlotSize / kOsPageSize);
  fake.reports_free_pages = true;
  backend->init(fake.get(), stats.get(), 64 * kMiB, kHugepagesAuto);
  backend->set_own_advice_cap(1);
  Span* u = backend->alloc(kMaxLarge, 16);
  ASSERT_NE(u, nullptr);
  const uintptr_t arena = reinterpret_cast<uintptr_t>(fake.reservations.back().first);
  skip_advice();
  Span* a = backend->alloc(4 * kMiB, 16);  // advised on its own: the one call allowed
  Span* b = backend->alloc(4 * kMiB, 16);  // fresh, past the cap: keeps MADV_NOHUGEPAGE
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const uintptr_t a_start = reinterpret_cast<uintptr_t>(a->start);
  EXPECT_EQ(advice_since(), (HugeAdvice{{a_start, 4 * kMiB, true},
                                        {arena, 64 * kMiB, true},
                                        {a_start + 4 * kMiB, arena + 64 * kMiB - a_start - 4 * kMiB, false}}));
  EXPECT_EQ(stats->get(Stat::hugepage_own_advice), 1u);
  for (Span* s : {u, a, b}) backend->release(s);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// The real platform's answer (getdents64 and the balloon device's
// features, without libc's directory stream) agrees with a plain reading
// of sysfs: some virtio-balloon device offers feature bit 5 (free page
// reporting).  Both answers are "no" on a machine without such a device.
TEST(LinuxPlatform, HostReportsFreePagesAgreesWithSysfs) {
  namespace fs = std::filesystem;
  bool expected = false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/bus/virtio/drivers/virtio_balloon", ec)) {
    if (e.path().filename().string().rfind("virtio", 0) != 0) continue;
    std::ifstream in(e.path() / "features");
    std::string bits;
    in >> bits;
    expected = expected || (bits.size() > 5 && bits[5] == '1');
  }
  const Platform& p = pal::linux_platform();
  EXPECT_EQ(p.host_reports_free_pages(p.ctx), expected);
}

// When the arenas are advised, the slots already touched on 4 KiB pages
// are measured (Platform::resident_pages): khugepaged would collapse each
// into a whole hugepage, so one with more than an eighth of its pages
// untouched keeps 4 KiB pages (MADV_NOHUGEPAGE on its own), and one
// touched whole takes the arena's advice, as do the untouched slots.
// Emptied and taken again, a thin slot gets the advice back.
TEST_F(BackendTest, HugepageAdviceLeavesThinTouchedSlotsOnSmallPages) {
  set(Opt::hugepage_threshold, 16 * kMiB);
  backend->init(fake.get(), stats.get(), 64 * kMiB, true);
  // Seven slots of two 1 MiB spans each, every page written but in slot
  // 1's second span (64 KiB of it written: 15 of 32 units' worth untouched).
  std::vector<Span*> spans;
  for (unsigned i = 0; i < 14; ++i) {
    Span* s = backend->alloc_units_span(16);
    ASSERT_NE(s, nullptr);
    if (i == 0) {
      skip_advice();  // the unit map's leaf
      // The fake records advice without giving it: keep the arena on 4 KiB
      // pages whatever the system's THP mode, so that mincore sees what
      // was written.
      ASSERT_EQ(madvise(fake.reservations[0].first, 64 * kMiB, MADV_NOHUGEPAGE), 0);
    }
    std::memset(s->start, 1, i == 3 ? kUnitSize : s->bytes);
    spans.push_back(s);
  }
  ASSERT_EQ(fake.reservations.size(), 1u);
  const uintptr_t arena = reinterpret_cast<uintptr_t>(fake.reservations[0].first);
  for (unsigned i = 0; i < 14; ++i) {
    ASSERT_EQ(reinterpret_cast<uintptr_t>(spans[i]->start), arena + i * kMiB);
  }
  EXPECT_TRUE(advice_since().empty());
  // Slot 7 half full and written, then the span that reaches the threshold.
  spans.push_back(backend->alloc_units_span(16));
  ASSERT_NE(spans.back(), nullptr);
  std::memset(spans.back()->start, 1, spans.back()->bytes);
  EXPECT_EQ(advice_since(), HugeAdvice{});
  spans.push_back(backend->alloc_units_span(16));
  ASSERT_NE(spans.back(), nullptr);
  EXPECT_EQ(stats->get(Stat::hugepage_advice), 1u);
  EXPECT_EQ(advice_since(), (HugeAdvice{{arena, 64 * kMiB, true},
                                    {arena + 1 * kSlotSize, kSlotSize, false},
                                    {arena + 7 * kSlotSize, kSlotSize, false}}));
  EXPECT_EQ(stats->get(Stat::hugepage_thin_slots), 2u);
  EXPECT_EQ(backend->check_invariants(), nullptr);

  // Slot 1 emptied goes back to the free slots; taken again for spans, it
  // gets the arenas' advice back.
  backend->release(spans[2]);
  backend->release(spans[3]);
  std::vector<Span*> more;
  for (unsigned i = 0; i < 2; ++i) {
    more.push_back(backend->alloc_units_span(16));
    ASSERT_NE(more.back(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(more.back()->start), arena + kSlotSize + i * kMiB);
  }
  EXPECT_EQ(advice_since(), (HugeAdvice{{arena + 1 * kSlotSize, kSlotSize, true}}));
  spans[2] = more[0];
  spans[3] = more[1];
  for (Span* s : spans) backend->release(s);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

TEST_F(BackendTest, HugepageAdviceIsOffWithTheOption) {
  set(Opt::hugepage_threshold, 0);
  backend->init(fake.get(), stats.get(), 64 * kMiB, false);
  Span* h = backend->alloc(4 * kMiB, 16);
  ASSERT_NE(h, nullptr);
  for (const auto& c : fake.hugepage_advice) EXPECT_FALSE(c.huge);
  backend->release(h);
}

TEST_F(BackendTest, DecayGivesIdleSlotsMadvFreeAfterDecayMs) {
  Span* h = backend->alloc(4 * kMiB, 16);
  char* start = h->start;
  backend->release(h);
  fake.advance_ms(500);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 0u);
  EXPECT_TRUE(fake.calls.empty());
  fake.advance_ms(600);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 4 * kMiB);
  ASSERT_EQ(fake.calls.size(), 1u);
  EXPECT_EQ(fake.calls[0].addr, reinterpret_cast<uintptr_t>(start));
  EXPECT_EQ(fake.calls[0].len, 4 * kMiB);
  EXPECT_EQ(fake.calls[0].advice, Advice::kFree);
  EXPECT_EQ(st(Stat::lazy_bytes), 4 * kMiB);
  EXPECT_EQ(st(Stat::retained_bytes), 0u);
  EXPECT_EQ(st(Stat::purge_lazy_calls), 1u);
  EXPECT_EQ(st(Stat::purge_lazy_bytes), 4 * kMiB);
  // A second pass finds nothing: LAZY memory is not purged again.
  fake.advance_ms(5000);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 0u);
  // Reuse of LAZY memory: counted, and not assumed zero.
  Span* again = backend->alloc(4 * kMiB, 16);
  EXPECT_EQ(again->start, start);
  EXPECT_FALSE(again->zero);
  EXPECT_EQ(st(Stat::reuse_lazy_bytes), 4 * kMiB);
  backend->release(again);
}

TEST_F(BackendTest, UnitsInPartlyUsedSlotsWaitForPartialDecay) {
  Span* keep = backend->alloc(kUnitSize, 16);
  Span* drop = backend->alloc(2 * kUnitSize, 16);
  ASSERT_EQ(drop->slot, keep->slot);
  char* where = drop->start;
  backend->release(drop);
  fake.advance_ms(2000);  // past decay_ms, not partial_decay_ms
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 0u);
  fake.advance_ms(2500);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kUnitSize);
  ASSERT_EQ(fake.calls.size(), 1u);
  EXPECT_EQ(fake.calls[0].addr, reinterpret_cast<uintptr_t>(where));
  EXPECT_EQ(fake.calls[0].len, 2 * kUnitSize);
  backend->release(keep);
}

TEST_F(BackendTest, OldestFirstAndBoundedBatches) {
  set(Opt::purge_batch, 4 * kMiB);
  Span* old_one = backend->alloc(8 * kMiB, 16);
  Span* fence = backend->alloc(2 * kMiB, 16);  // keeps the two runs apart
  Span* young = backend->alloc(8 * kMiB, 16);
  backend->release(old_one);
  fake.advance_ms(700);
  backend->release(young);
  fake.advance_ms(400);  // old: 1.1 s idle, young: 0.4 s
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 8 * kMiB);
  for (const auto& c : fake.calls) {
    EXPECT_LE(c.len, 4 * kMiB);
    EXPECT_LT(c.addr, reinterpret_cast<uintptr_t>(fence->start));  // only the old run
  }
  EXPECT_EQ(fake.advised_bytes(Advice::kFree), 8 * kMiB);
  fake.advance_ms(700);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 8 * kMiB);
  backend->release(fence);
}

TEST_F(BackendTest, EagerPolicyPurgesOnRelease) {
  set(Opt::purge, kPurgeEager);
  set(Opt::purge_advice, kAdviceDontneed);
  Span* s = backend->alloc(3 * kUnitSize, 16);
  backend->release(s);
  purger->after_release(fake.now_ns, false);
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 3 * kUnitSize);
  EXPECT_EQ(st(Stat::retained_bytes), 0u);
  Span* again = backend->alloc(3 * kUnitSize, 16);
  EXPECT_TRUE(again->zero);  // DONTNEED memory reads as zero
  backend->release(again);
}

TEST_F(BackendTest, NeverPolicyKeepsEverythingUntilPurgeAll) {
  set(Opt::purge, kPurgeNever);
  Span* s = backend->alloc(6 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(100000);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 0u);
  purger->after_release(fake.now_ns, false);
  EXPECT_TRUE(fake.calls.empty());
  EXPECT_EQ(purger->purge_all(false), 6 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 6 * kMiB);
  // purge_all(dontneed) also turns LAZY memory CLEAN.
  EXPECT_EQ(purger->purge_all(true), 6 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 0u);
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 6 * kMiB);
  Span* again = backend->alloc(6 * kMiB, 16);
  EXPECT_TRUE(again->zero);
  backend->release(again);
}

TEST_F(BackendTest, InlineDecayWithoutBackgroundThreadIsRateLimited) {
  set(Opt::background_interval_ms, 100);
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(1500);
  purger->after_release(fake.now_ns, true);  // a background thread would do it
  EXPECT_TRUE(fake.calls.empty());
  purger->after_release(fake.now_ns, false);
  EXPECT_EQ(fake.calls.size(), 1u);
  EXPECT_EQ(st(Stat::inline_purges), 1u);
  Span* t = backend->alloc(2 * kMiB, 16);
  backend->release(t);
  fake.advance_ms(1050);
  purger->after_release(fake.now_ns, false);
  EXPECT_EQ(st(Stat::inline_purges), 2u);
}

TEST_F(BackendTest, FallsBackToDontneedWhenKernelRejectsMadvFree) {
  fake.fail_free_with = EINVAL;
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(2000);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  EXPECT_TRUE(purger->adviser().free_unsupported());
  EXPECT_EQ(st(Stat::purge_free_unsupported), 1u);
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 2 * kMiB);
  EXPECT_EQ(st(Stat::clean_bytes), st(Stat::reserved_bytes));
}

TEST_F(BackendTest, FailedAdviceLeavesMemoryRetained) {
  fake.fail_free_with = EAGAIN;
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(2000);
  purger->decay_pass(fake.now_ns);
  EXPECT_GT(st(Stat::purge_failures), 0u);
  EXPECT_EQ(st(Stat::retained_bytes), 2 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 0u);
  fake.fail_free_with = 0;
  fake.advance_ms(10);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);  // retried later
  EXPECT_EQ(st(Stat::lazy_bytes), 2 * kMiB);
}

TEST_F(BackendTest, MemoryBeingPurgedIsNeverHandedOut) {
  // Collect by hand, allocate while the batch is out, then finish.
  Span* s = backend->alloc(2 * kMiB, 16);
  char* where = s->start;
  backend->release(s);
  fake.advance_ms(2000);
  PurgeSelect sel{fake.now_ns, 0, 0, 64 * kMiB, 64 * kMiB, false};
  PurgeBatch batch;
  backend->purge_collect(sel, &batch);
  ASSERT_EQ(batch.nranges, 1u);
  EXPECT_EQ(batch.ranges[0].addr, where);
  Span* other = backend->alloc(2 * kMiB, 16);
  EXPECT_NE(other->start, where);
  Span* unit = backend->alloc(kUnitSize, 16);
  EXPECT_NE(unit->slot->base, reinterpret_cast<uintptr_t>(where));
  backend->purge_finish(&batch, false, false);
  backend->release(other);
  backend->release(unit);
  // Everything is free again and one run: a 64 MiB block fits.
  Span* all = backend->alloc(64 * kMiB, 16);
  EXPECT_NE(all, nullptr);
  EXPECT_EQ(st(Stat::arenas), 1u);
  backend->release(all);
}

TEST_F(BackendTest, StateBytesAlwaysAddUpToReserved) {
  uint32_t x = 7;
  std::vector<Span*> live;
  for (int i = 0; i < 3000; ++i) {
    x = x * 1103515245u + 12345u;
    unsigned op = (x >> 16) % 8;
    if (live.size() < 40 && op < 5) {
      size_t size = ((x >> 8) % 2 == 0) ? ((x >> 10) % (1 << 20)) + 1 : ((x >> 10) % (6 << 20)) + 1;
      size_t align = (x >> 12) % 7 == 0 ? (size_t(1) << (16 + (x >> 20) % 8)) : 16;
      if (Span* s = backend->alloc(size, align, (x >> 9) % 4 == 0)) live.push_back(s);
    } else if (!live.empty() && op == 5) {
      Span* s = live[(x >> 4) % live.size()];
      backend->resize(s, ((x >> 10) % (8 << 20)) + 1);
    } else if (!live.empty()) {
      size_t k = (x >> 4) % live.size();
      backend->release(live[k]);
      live[k] = live.back();
      live.pop_back();
    }
    if (i % 97 == 0) {
      fake.advance_ms(300);
      purger->decay_pass(fake.now_ns);
    }
    if (i % 501 == 0) purger->purge_all(i % 2 == 0);
    MemoryState m = backend->memory_state();
    ASSERT_EQ(m.active + m.retained + m.lazy + m.clean, m.reserved) << "step " << i;
    const char* broken = backend->check_invariants();
    ASSERT_EQ(broken, nullptr) << broken << " at step " << i;
  }
  for (Span* s : live) backend->release(s);
}


// Span records (MetaPool): the pages above the lowest `keep` free records
// whose every record is free go back; pages holding a live record, and the
// kept records, never do; records from purged pages come back zero-filled,
// before any new mapping; a refused advice lists the records again.
TEST(MetaPoolTest, GivesBackWholePagesOfFreeRecordsAboveTheKept) {
  test::FakePlatform fake;
  Stats stats;
  MetaPool<Span> pool;
  constexpr size_t kPer = MetaPool<Span>::kPerPage;
  static_assert(kPer == 16, "Span records: 16 to a 4 KiB page");
  constexpr size_t kRecords = 40 * kPer;  // 40 pages of one 256 KiB chunk
  std::vector<Span*> recs;
  for (size_t i = 0; i < kRecords; ++i) {
    Span* s = pool.alloc(*fake.get(), &stats);
    ASSERT_NE(s, nullptr);
    memset(static_cast<void*>(s), 0xab, sizeof(Span));
    recs.push_back(s);
  }
  const size_t mapped = fake.mapped_bytes;
  auto page_of = [](const void* p) { return reinterpret_cast<uintptr_t>(p) & ~(kOsPageSize - 1); };
  // Every fifth page keeps one live record; the rest are freed, in an
  // order that scatters the free list.
  std::vector<Span*> live;
  for (size_t i = 0; i < kRecords; ++i) {
    Span* s = recs[(i * 7) % kRecords];
    if (((i * 7) % kRecords) % (5 * kPer) == 3) {
      live.push_back(s);
      continue;
    }
    pool.free(s);
  }
  ASSERT_EQ(live.size(), 8u);
  const size_t freed = kRecords - live.size();
  EXPECT_EQ(pool.free_records(), freed);
  MetaPurge p;
  const size_t keep = 3 * kPer;  // the three lowest pages' worth stay listed
  pool.purge_collect(keep, &p);
  ASSERT_GT(p.nranges, 0u);
  size_t pages = 0;
  for (unsigned i = 0; i < p.nranges; ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.ranges[i].addr) % kOsPageSize, 0u);
    EXPECT_EQ(p.ranges[i].len % kOsPageSize, 0u);
    for (Span* s : live) {
      uintptr_t pg = page_of(s);
      uintptr_t a = reinterpret_cast<uintptr_t>(p.ranges[i].addr);
      EXPECT_FALSE(pg >= a && pg < a + p.ranges[i].len) << "a page with a live record was taken";
    }
    pages += p.ranges[i].len / kOsPageSize;
  }
  // 40 pages: 8 hold a live record, the 3 lowest whole pages of free
  // records (pages 1..3: page 0 holds a live one) are kept.
  EXPECT_EQ(pages, 40u - 8u - 3u);
  EXPECT_EQ(p.bytes, pages * kOsPageSize);
  EXPECT_EQ(pool.free_records(), freed - pages * kPer);
  // Nothing freed since: a second look finds nothing (and sorts nothing).
  MetaPurge again;
  pool.purge_collect(keep, &again);
  EXPECT_EQ(again.nranges, 0u);
  pool.purge_finish(p, true, &stats);
  EXPECT_EQ(stats.get(Stat::metadata_purged_bytes), p.bytes);
  EXPECT_EQ(stats.get(Stat::metadata_page_purges), pages);
  EXPECT_EQ(pool.purged_bytes(), p.bytes);
  // Every record handed out again: listed ones first, lowest address first,
  // then the rest of the chunk, then the purged pages, zero-filled; no new
  // mapping.
  const size_t listed = pool.free_records();
  const size_t chunk_left = 256 * 1024 / sizeof(Span) - kRecords;
  Span* prev = nullptr;
  for (size_t i = 0; i < freed + chunk_left; ++i) {
    Span* s = pool.alloc(*fake.get(), &stats);
    ASSERT_NE(s, nullptr);
    if (i < listed && prev) {
      EXPECT_LT(prev, s) << "the sorted list hands out low addresses first";
    }
    prev = s;
    if (i >= listed) {
      const unsigned char* b = reinterpret_cast<const unsigned char*>(s);
      for (size_t k = 0; k < sizeof(Span); ++k) ASSERT_EQ(b[k], 0) << "record " << i << " byte " << k;
    }
  }
  EXPECT_EQ(fake.mapped_bytes, mapped);
  EXPECT_EQ(stats.get(Stat::metadata_purged_bytes), 0u);
  EXPECT_EQ(pool.live_records(), kRecords + chunk_left);
}

// metadata_bytes counts the pages records lie on, not the chunks mapped
// for them (metadata_mapped_bytes): a 10 MiB program mapped 2.9 MiB of
// metadata and wrote 150 KiB of it.  Pages of a purged run taken again
// were counted when first carved.
TEST(MetaPoolTest, CountsThePagesItsRecordsLieOnNotTheChunksMapped) {
  test::FakePlatform fake;
  Stats stats;
  MetaPool<Span> pool;
  constexpr size_t kPer = MetaPool<Span>::kPerPage;
  std::vector<Span*> recs{pool.alloc(*fake.get(), &stats)};
  EXPECT_EQ(stats.get(Stat::metadata_mapped_bytes), 256u * 1024);
  EXPECT_EQ(stats.get(Stat::metadata_bytes), kOsPageSize);
  while (recs.size() < 3 * kPer + 1) recs.push_back(pool.alloc(*fake.get(), &stats));
  EXPECT_EQ(stats.get(Stat::metadata_bytes), 4 * kOsPageSize);
  // Reused from the list: nothing new written.
  pool.free(recs.back());
  recs.back() = pool.alloc(*fake.get(), &stats);
  EXPECT_EQ(stats.get(Stat::metadata_bytes), 4 * kOsPageSize);
  // The top two whole pages of free records go back and are taken again
  // once the chunk is used up.
  for (size_t i = 2 * kPer; i < recs.size(); ++i) pool.free(recs[i]);
  recs.resize(2 * kPer);
  MetaPurge p;
  pool.purge_collect(0, &p);
  ASSERT_EQ(p.bytes, kOsPageSize);  // the top page holds one record, not whole
  pool.purge_finish(p, true, &stats);
  EXPECT_EQ(stats.get(Stat::metadata_purged_bytes), kOsPageSize);
  const size_t chunk_records = 256 * 1024 / sizeof(Span);
  while (pool.live_records() < chunk_records) recs.push_back(pool.alloc(*fake.get(), &stats));
  EXPECT_EQ(stats.get(Stat::metadata_mapped_bytes), 256u * 1024);
  EXPECT_EQ(stats.get(Stat::metadata_bytes), 256u * 1024);
  EXPECT_EQ(stats.get(Stat::metadata_purged_bytes), 0u);

  // A record larger than a page counts the pages it covers.
  struct Big {
    char bytes[6000];
  };
  Stats big_stats;
  MetaPool<Big> big;
  big.alloc(*fake.get(), &big_stats);
  EXPECT_EQ(big_stats.get(Stat::metadata_bytes), 2 * kOsPageSize);
  big.alloc(*fake.get(), &big_stats);  // 6016..12032
  EXPECT_EQ(big_stats.get(Stat::metadata_bytes), 3 * kOsPageSize);
}

TEST(MetaPoolTest, KeepsRecordsUnderTheReserveAndRelistsThemWhenTheAdviceFails) {
  test::FakePlatform fake;
  Stats stats;
  MetaPool<Span> pool;
  constexpr size_t kPer = MetaPool<Span>::kPerPage;
  std::vector<Span*> recs;
  for (size_t i = 0; i < 8 * kPer; ++i) recs.push_back(pool.alloc(*fake.get(), &stats));
  for (Span* s : recs) pool.free(s);
  MetaPurge p;
  // All free, but no more than the reserve plus a page: nothing goes back.
  pool.purge_collect(7 * kPer, &p);
  EXPECT_EQ(p.nranges, 0u);
  pool.purge_collect(2 * kPer, &p);
  ASSERT_EQ(p.nranges, 1u);  // the six highest pages, one run
  EXPECT_EQ(p.bytes, 6 * kOsPageSize);
  EXPECT_EQ(pool.free_records(), 2 * kPer);
  pool.purge_finish(p, false, &stats);
  EXPECT_EQ(pool.free_records(), 8 * kPer);
  EXPECT_EQ(stats.get(Stat::metadata_purged_bytes), 0u);
  // malloc_trim's look (keep 0) after a lower keep finds them again.
  pool.purge_collect(0, &p);
  EXPECT_EQ(p.bytes, 8 * kOsPageSize);
  pool.purge_finish(p, true, &stats);
  EXPECT_EQ(pool.free_records(), 0u);
  EXPECT_EQ(stats.get(Stat::metadata_purged_bytes), 8 * kOsPageSize);
}

// A decay pass gives back the pages of span records that released spans
// left free, above the purger's reserve (Purger::meta_keep), with
// MADV_DONTNEED; they are reused before any new mapping.
TEST_F(BackendTest, DecayPassGivesBackPagesOfFreeSpanRecords) {
  std::vector<Span*> spans;
  for (int i = 0; i < 1500; ++i) {
    Span* s = backend->alloc_units_span(1);
    ASSERT_NE(s, nullptr);
    spans.push_back(s);
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i % 100 != 0) backend->release(spans[i]);
  }
  const size_t live = backend->span_records();
  EXPECT_EQ(live, 15u);
  fake.advance_ms(1100);
  purger->decay_pass(fake.now_ns);
  const uint64_t purged = st(Stat::metadata_purged_bytes);
  // 1485 free records, 256 kept: at least the pages above them that hold
  // no live record (15 pages of 94 do).
  EXPECT_GE(purged, (1485 - Purger::kMetaKeepRecords) / 16 * kOsPageSize - 16 * kOsPageSize);
  EXPECT_LE(purged, (1485 - Purger::kMetaKeepRecords) / 16 * kOsPageSize);
  EXPECT_GE(fake.advised_bytes(Advice::kDontNeed), purged);
  EXPECT_EQ(st(Stat::metadata_page_purges) * kOsPageSize, purged);
  // A second pass with nothing freed gives nothing more.
  fake.advance_ms(1100);
  purger->decay_pass(fake.now_ns);
  EXPECT_EQ(st(Stat::metadata_purged_bytes), purged);
  // Spans made again take the free records, the rest of the second chunk
  // (548 records) and the purged pages before mapping more.
  const size_t mapped = fake.mapped_bytes;
  std::vector<Span*> again;
  for (int i = 0; i < 1485 + 548; ++i) again.push_back(backend->alloc_units_span(1));
  EXPECT_EQ(st(Stat::metadata_purged_bytes), 0u);
  EXPECT_EQ(fake.mapped_bytes, mapped);
  for (Span* s : again) backend->release(s);
  for (size_t i = 0; i < spans.size(); i += 100) backend->release(spans[i]);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

}  // namespace
}  // namespace lazymalloc
