// The backend's purge mechanism: taking free units out of circulation in
// batches of ranges (by age, LAZY for the second stage, or every slot in
// address order), giving them back in their new page state, and the
// deadlines the purger sleeps to.  Which units and when is the purger's
// choice (purge/), passed in PurgeSelect.
#include "backend/backend.h"

#include <cstring>

#include "core/bits.h"
#include "core/options.h"

namespace lazymalloc {

namespace {

// Appends the unit runs of `mask` in the slot at `base` to the batch,
// merging with the previous range when contiguous.  Returns the mask of
// units that fitted.
uint32_t add_ranges(PurgeBatch* b, uintptr_t base, uint32_t mask, size_t max_range) {
  uint32_t taken = 0;
  while (mask) {
    unsigned first = ctz32(mask);
    unsigned n = 0;
    while (first + n < 32 && (mask & (uint32_t(1) << (first + n)))) ++n;
    char* addr = reinterpret_cast<char*>(base + size_t(first) * kUnitSize);
    size_t len = size_t(n) * kUnitSize;
    PurgeRange* last = b->nranges ? &b->ranges[b->nranges - 1] : nullptr;
    if (last && static_cast<char*>(last->addr) + last->len == addr && last->len + len <= max_range) {
      last->len += len;
    } else {
      if (b->nranges == PurgeBatch::kMaxRanges) break;
      b->ranges[b->nranges++] = {addr, len};
    }
    uint32_t run = bit_range(first, n);
    taken |= run;
    mask &= ~run;
    b->bytes += len;
  }
  return taken;
}

}  // namespace

bool Backend::take_units(SlotMeta* m, uint32_t want, PurgeBatch* b, size_t max_range) {
  uint32_t mask = add_ranges(b, m->base, want, max_range);
  if (!mask) return false;
  PurgeBatch::Item& it = b->items[b->nitems++];
  it.slot = m;
  it.mask = mask;
  it.run_len = 0;
  m->purge_mask = m->lazy & mask;  // remembered to undo on failure
  m->retained &= ~mask;
  m->lazy &= ~mask;
  m->used |= mask;
  m->purging |= mask;
  if (m->used == kAllUnits) partial_remove(m);
  if (!m->retained) dirty_remove(m);
  lazy_remove(m);
  return true;
}

SlotMeta* Backend::take_run(SlotMeta* m, const PurgeSelect& sel, PurgeBatch* b, size_t max_range) {
  auto want_of = [&](SlotMeta* s) -> uint32_t {
    if (sel.lazy_stage) {
      uint64_t lazy_age = sel.now_ns > s->lazy_ns ? sel.now_ns - s->lazy_ns : 0;
      return s->lazy && lazy_age >= policy_->wait_ns(*s, sel.min_age_lazy_ns, sel) ? s->lazy : 0;
    }
    uint64_t age = sel.now_ns > s->free_ns ? sel.now_ns - s->free_ns : 0;
    if (s->retained && age < policy_->wait_ns(*s, sel.min_age_free_ns, sel)) return 0;
    return s->retained | (sel.include_lazy ? s->lazy : 0);
  };
  SlotMeta* head = run_head(m);
  SlotMeta* end = head + head->run_len;
  // The eligible slots around `m`, within the byte budget.  Only they leave
  // circulation: the rest of the run stays allocatable while madvise runs.
  size_t budget = b->bytes < sel.max_bytes ? sel.max_bytes - b->bytes : 0;
  size_t bytes = units_bytes(want_of(m));
  SlotMeta* first = m;
  SlotMeta* last = m;
  while (last + 1 < end && bytes < budget) {
    uint32_t w = want_of(last + 1);
    if (!w) break;
    bytes += units_bytes(w);
    ++last;
  }
  while (first > head && bytes < budget) {
    uint32_t w = want_of(first - 1);
    if (!w) break;
    bytes += units_bytes(w);
    --first;
  }
  run_cut(head, first, last);
  size_t n = size_t(last - first) + 1;
  PurgeBatch::Item& it = b->items[b->nitems++];
  it.slot = first;
  it.mask = 0;
  it.run_len = uint32_t(n);
  purging_slots_ += n;
  for (SlotMeta* s = first; s <= last; ++s) {
    s->kind = SlotKind::kPurging;
    s->purging = 0;
    s->purge_mask = 0;
    uint32_t w = want_of(s);
    if (!w || b->nranges == PurgeBatch::kMaxRanges) continue;
    uint32_t mask = add_ranges(b, s->base, w, max_range);
    s->purging = mask;               // units being purged
    s->purge_mask = s->lazy & mask;  // of which were LAZY
    s->retained &= ~mask;
    s->lazy &= ~mask;
    if (!s->retained) dirty_remove(s);
    lazy_remove(s);
  }
  return last + 1;
}

bool Backend::batch_full(const PurgeSelect& sel, const PurgeBatch* b) {
  return b->bytes >= sel.max_bytes || b->nitems == PurgeBatch::kMaxItems ||
         b->nranges == PurgeBatch::kMaxRanges;
}

void Backend::purge_collect(const PurgeSelect& sel, PurgeBatch* b) {
  b->start(false);
  uint64_t min_age = sel.min_age_free_ns < sel.min_age_partial_ns ? sel.min_age_free_ns
                                                                  : sel.min_age_partial_ns;
  size_t max_range = sel.unit_range();
  LockGuard g(lock_);
  // Oldest first along the dirty list.  After each take the list may have
  // lost entries, so the walk restarts at its head (skipping is bounded by
  // the batch's item limit).
  SlotMeta* m = dirty_head_;
  while (m && !batch_full(sel, b)) {
    uint64_t age = sel.now_ns > m->free_ns ? sel.now_ns - m->free_ns : 0;
    if (age < min_age) break;  // the rest of the list is younger
    bool units = m->kind == SlotKind::kUnits;
    uint64_t base = units ? sel.min_age_partial_ns : sel.min_age_free_ns;
    if ((units || m->kind == SlotKind::kFree) && age >= policy_->wait_ns(*m, base, sel)) {
      if (units) {
        uint32_t want = m->retained | (sel.include_lazy ? m->lazy : 0);
        if (!take_units(m, want, b, max_range)) break;
      } else {
        take_run(m, sel, b, max_range);
      }
      m = dirty_head_;
      continue;
    }
    if ((units || m->kind == SlotKind::kFree) && age >= base && !m->suppressed) {
      // Old enough for plain decay; hysteresis says this slot comes back.
      m->suppressed = true;
      stats_->add(Stat::purges_suppressed, 1);
    }
    m = m->dirty_next;
  }
}

void Backend::purge_collect_lazy(const PurgeSelect& sel, PurgeBatch* b) {
  b->start(true);
  size_t max_range = sel.unit_range();
  LockGuard g(lock_);
  SlotMeta* m = lazy_head_;
  while (m && !batch_full(sel, b)) {
    uint64_t age = sel.now_ns > m->lazy_ns ? sel.now_ns - m->lazy_ns : 0;
    if (age < sel.min_age_lazy_ns) break;  // the rest of the list is younger
    bool units = m->kind == SlotKind::kUnits;
    if ((units || m->kind == SlotKind::kFree) && age >= policy_->wait_ns(*m, sel.min_age_lazy_ns, sel)) {
      if (units) {
        if (!take_units(m, m->lazy, b, max_range)) break;
      } else {
        take_run(m, sel, b, max_range);
      }
      m = lazy_head_;
      continue;
    }
    m = m->lazy_next;
  }
}

uint64_t Backend::next_decay_ns(const PurgeSelect& sel) {
  uint64_t min_base = sel.min_age_free_ns < sel.min_age_partial_ns ? sel.min_age_free_ns
                                                                   : sel.min_age_partial_ns;
  uint64_t best = kNoDeadline;
  unsigned seen = 0;
  LockGuard g(lock_);
  for (SlotMeta* m = dirty_head_; m; m = m->dirty_next) {
    uint64_t bound = m->free_ns + min_base;  // no later entry is due sooner
    if (bound >= best) break;
    if (++seen > kDeadlineScan) return bound;
    bool units = m->kind == SlotKind::kUnits;
    if (!units && m->kind != SlotKind::kFree) continue;  // being purged: settled later
    uint64_t due = policy_->due_ns(*m, m->free_ns, units ? sel.min_age_partial_ns : sel.min_age_free_ns, sel);
    if (due < best) best = due;
  }
  return best;
}

uint64_t Backend::next_lazy_ns(const PurgeSelect& sel) {
  uint64_t best = kNoDeadline;
  unsigned seen = 0;
  LockGuard g(lock_);
  for (SlotMeta* m = lazy_head_; m; m = m->lazy_next) {
    uint64_t bound = m->lazy_ns + sel.min_age_lazy_ns;
    if (bound >= best) break;
    if (++seen > kDeadlineScan) return bound;
    if (m->kind != SlotKind::kUnits && m->kind != SlotKind::kFree) continue;
    uint64_t due = policy_->due_ns(*m, m->lazy_ns, sel.min_age_lazy_ns, sel);
    if (due < best) best = due;
  }
  return best;
}

void Backend::purge_collect_all(const PurgeSelect& sel, PurgeCursor* cur, PurgeBatch* b) {
  b->start(false);
  size_t max_range = sel.unit_range();
  LockGuard g(lock_);
  if (!cur->started) {
    cur->arena = arenas_;
    cur->slot = 0;
    cur->started = true;
  }
  while (cur->arena && !batch_full(sel, b)) {
    Arena* a = cur->arena;
    if (cur->slot >= a->nslots) {
      cur->arena = a->next;
      cur->slot = 0;
      continue;
    }
    SlotMeta* m = &a->slots[cur->slot];
    uint32_t want = m->retained | (sel.include_lazy ? m->lazy : 0);
    if (m->kind == SlotKind::kUnits) {
      want &= ~m->used;
      if (want && !take_units(m, want, b, max_range)) break;
      cur->slot++;
    } else if (m->kind == SlotKind::kFree && want) {
      SlotMeta* after = take_run(m, sel, b, max_range);
      cur->slot = size_t(after - a->slots);
    } else {
      cur->slot++;
    }
  }
}

void Backend::purge_finish(PurgeBatch* b, bool made_clean, bool failed) {
  uint64_t now = platform_->now_ns(platform_->ctx);
  LockGuard g(lock_);
  PublishOnExit publish{this};
  auto settle = [&](SlotMeta* s, uint32_t mask, uint32_t was_lazy) {
    if (!mask) return;
    if (failed) {
      s->retained |= mask & ~was_lazy;
      s->lazy |= was_lazy;
      if (s->retained && !s->in_dirty) dirty_touch(s, s->free_ns);
      if (s->lazy && !s->in_lazy) lazy_touch(s, now);
      return;
    }
    s->purged_ns = now;
    s->lazy_purged = b->lazy_stage;
    uint64_t from_retained = units_bytes(mask & ~was_lazy);
    uint64_t from_lazy = units_bytes(was_lazy);
    pages_sub(Stat::retained_bytes, from_retained);
    pages_sub(Stat::lazy_bytes, from_lazy);
    if (made_clean) {
      pages_add(Stat::clean_bytes, from_retained + from_lazy);
    } else {
      pages_add(Stat::lazy_bytes, from_retained + from_lazy);
      s->lazy |= mask;
      lazy_touch(s, now);
    }
  };
  for (unsigned i = 0; i < b->nitems; ++i) {
    PurgeBatch::Item& it = b->items[i];
    if (it.run_len == 0) {
      SlotMeta* m = it.slot;
      settle(m, it.mask, m->purge_mask);
      m->purge_mask = 0;
      m->used &= ~it.mask;
      m->purging &= ~it.mask;
      if (m->used == 0) slot_units_to_free_run(m, 0); else partial_add(m);
      continue;
    }
    for (size_t j = 0; j < it.run_len; ++j) {
      SlotMeta* s = it.slot + j;
      settle(s, s->purging, s->purge_mask);
      s->purging = 0;
      s->purge_mask = 0;
    }
    purging_slots_ -= it.run_len;
    insert_free_run(it.slot, it.run_len);
  }
  b->nitems = 0;
  b->nranges = 0;
  if (!failed) review_hugepages_locked();
}

uint64_t Backend::oldest_retained_ns() {
  LockGuard g(lock_);
  return dirty_head_ ? dirty_head_->free_ns : 0;
}
}  // namespace lazymalloc
