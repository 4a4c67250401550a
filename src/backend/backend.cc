// The backend's core: set-up, span records, allocation of unit runs and
// slot runs (with the hard limit and the hugepage advice), release of spans
// and huge blocks, and resizing in place.  The rest of Backend: arena.cc
// (arenas, page map), slot_lists.cc (bins and lists), purge.cc (purge
// mechanism), invariants.cc (self-check).
#include "backend/backend.h"

#include <cstring>

#include "core/bits.h"
#include "core/options.h"

namespace lazymalloc {

void Backend::init(const Platform* platform, Stats* stats, size_t arena_reserve, unsigned hugepages) {
  platform_ = platform;
  stats_ = stats;
  arena_reserve_ = align_up(arena_reserve < 2 * kSlotSize ? 2 * kSlotSize : arena_reserve, kSlotSize);
  hugepages_ = hugepages != kHugepagesOff;
  scope_pending_ = hugepages >= unsigned(kHugepagesAuto);
  reuse_scope_ = hugepages == unsigned(kHugepagesReused) ? kReuseAll : kReuseNone;
  stats_->set(Stat::hugepage_reuse_only, reuse_scope_);
}

// Asked only where advice is being decided (a huge block, the arenas'
// advice), so a program that never gets there never reads sysfs.
Backend::ReuseScope Backend::reuse_scope() {
  if (scope_pending_) {
    reuse_scope_ = platform_->host_reports_free_pages(platform_->ctx) ? kReuseSmall : kReuseNone;
    scope_pending_ = false;
    stats_->set(Stat::hugepage_reuse_only, reuse_scope_);
  }
  return reuse_scope_;
}

Span* Backend::new_span() { return spans_.alloc(*platform_, stats_); }

Span* Backend::span_record(Span* rec) {
  if (!rec) return new_span();
  memset(static_cast<void*>(rec), 0, sizeof(Span));
  return rec;
}

Gauge& Backend::page_gauge(Stat s) {
  switch (s) {
    case Stat::reserved_bytes: return pages_.reserved;
    case Stat::active_bytes: return pages_.active;
    case Stat::retained_bytes: return pages_.retained;
    case Stat::lazy_bytes: return pages_.lazy;
    case Stat::huge_bytes: return pages_.huge;
    default: return pages_.clean;
  }
}

void Backend::pages_add(Stat s, uint64_t n) {
  stats_->add(s, n);
  page_gauge(s).add(n);
}

void Backend::pages_sub(Stat s, uint64_t n) {
  stats_->sub(s, n);
  page_gauge(s).sub(n);
}

// ---------------------------------------------------------- allocation

// Moves the units in `mask` (all free) from their page state to active.
void Backend::account_take(SlotMeta* m, uint32_t mask) {
  m->touched = true;
  uint32_t purged = mask & ~m->retained;
  if (purged && m->purged_ns) {
    // Reuse after a purge: the policy judges whether it came too early.
    bool premature = false;
    m->decay_shift = policy_->reuse_shift(*m, now_, &premature);
    if (premature) {
      stats_->add(Stat::refaults, 1);
      stats_->add(Stat::refault_bytes, units_bytes(purged));
    }
    m->purged_ns = 0;
  }
  uint64_t r = units_bytes(mask & m->retained);
  uint64_t l = units_bytes(mask & m->lazy);
  uint64_t all = units_bytes(mask);
  pages_sub(Stat::retained_bytes, r);
  pages_sub(Stat::lazy_bytes, l);
  pages_sub(Stat::clean_bytes, all - r - l);
  pages_add(Stat::active_bytes, all);
  stats_->add(Stat::reuse_retained_bytes, r);
  stats_->add(Stat::reuse_lazy_bytes, l);
  stats_->add(Stat::reuse_clean_bytes, all - r - l);
  m->retained &= ~mask;
  m->lazy &= ~mask;
  if (!m->retained) dirty_remove(m);
  lazy_remove(m);
}

// Where a run of `n` units goes among the partial slots (fit_units in
// core/bits.h scores each slot's free runs): the window that touches the
// fewest CLEAN units (never touched, or purged: each is new resident
// memory, where RETAINED and LAZY units are resident already and cost no
// fault), then the smallest hole (best fit: the big holes stay whole for
// big requests), then the lowest address (the partial list's order, so
// the slots above empty and go back whole).  With `straddle` (large
// blocks, not small spans) a run may also cover the free units at the top
// of a partial slot and the free units at the bottom of the next slot of
// its arena, when that is cut into units too (straddle_fit): a hole that
// ends at a slot boundary is then no dead end.  First fit inside one slot
// took the lowest hole that fit whatever it cost: on `large-churn-1t`
// (256 KiB-1 MiB blocks, at most 8 MiB live) the heap held 7 slots, 14 MiB,
// with 12 MiB of RETAINED units in holes too small for the next block.
// The walk stops at a perfect window (resident, exact), or kFitScan slots
// after the first that fits: the partial list of a big heap is long, and
// this is under the backend lock.
// Sparse spans and the rest never share a slot (`sparse`).
//
// Whose slots (issue #16, ninth round): the partial slots are listed per
// owner (SlotMeta::owner; 0 shared).  A large block (`claims`) looks at its
// owner's slots, and at the shared ones only when none of those fits; a
// fresh slot it opens becomes its owner's.  So a thread that churns large
// blocks reuses the units it freed itself, whose lines are in its own
// core's caches: with one list, a miss of one thread's large cache took
// units the other thread had just written, and the two threads of
// `large-churn-2t` ran at 1.3x one thread's rate where two processes ran
// at 2x (every store of the touch loop an ownership transfer between the
// cores; docs/benchmarks.md, "Issue #16, ninth round").  A small span looks
// at the shared slots and its heap's, best fit over both (the shared ones
// first, kFitScan fitting slots in all), and a slot it
// opens stays shared: a heap's first spans share slots with every other
// heap's, as before, rather than touch a slot (a 2 MiB page under the
// hugepage advice) per thread.  Another owner's slots are the last resort
// before a new arena (choose_any_owner).
bool Backend::best_in_list(const SlotMeta* head, unsigned n, bool straddle, bool sparse, unsigned* scanned,
                           UnitFit* best, SlotMeta** best_slot) const {
  for (SlotMeta* p = const_cast<SlotMeta*>(head); p && *scanned < kFitScan; p = p->part_next) {
    if (p->sparse != sparse) continue;
    UnitFit f = fit_units(p->used, p->retained | p->lazy, n);
    if (straddle) {
      UnitFit across = straddle_fit(p, n);
      if (across.found() && (!f.found() || across.better_than(f))) f = across;
    }
    if (!f.found()) continue;
    if (!*best_slot || f.better_than(*best)) {
      *best = f;
      *best_slot = p;
      if (f.perfect()) return true;
    }
    ++*scanned;
  }
  return false;
}

bool Backend::choose_units(unsigned n, bool straddle, bool sparse, unsigned owner, bool claims, SlotMeta** slot,
                           unsigned* idx, UnitFit* fit) const {
  UnitFit best;
  SlotMeta* best_slot = nullptr;
  unsigned scanned = 0;
  const bool perfect = best_in_list(partial_[claims ? owner : 0], n, straddle, sparse, &scanned, &best, &best_slot);
  // The second list: for a large block, the shared one when its owner's had
  // no room; for a small span, its heap's (not for a sparse one: sparse
  // slots are shared).
  if (owner != 0 && !perfect && (claims ? !best_slot : !sparse))
    best_in_list(partial_[claims ? 0 : owner], n, straddle, sparse, &scanned, &best, &best_slot);
  if (!best_slot) return false;
  *slot = best_slot;
  *idx = best.index;
  *fit = best;
  return true;
}

// The last resort before a new arena: the best window in any owner's
// partial slots (the shared ones first, then owners 1..kOwners; at most
// kFitScan fitting slots in all).
bool Backend::choose_any_owner(unsigned n, bool sparse, SlotMeta** slot, unsigned* idx) const {
  UnitFit best;
  SlotMeta* best_slot = nullptr;
  unsigned scanned = 0;
  for (unsigned k = 0; k <= kOwners; ++k) {
    if (best_in_list(partial_[k], n, false, sparse, &scanned, &best, &best_slot)) break;
  }
  if (!best_slot) return false;
  *slot = best_slot;
  *idx = best.index;
  return true;
}

// A wholly free slot still resident: one whose every span went back, so
// that it left the partial list for the free runs with its units RETAINED
// (or LAZY), where a fresh slot was taken by run length alone.  When the
// partial slots' best window would touch CLEAN units, or none has room,
// such a slot is the better place: its units cost no fault.  Issue #16:
// in `xmalloc` a queue that drained emptied a whole slot while the top
// slot kept a few spans and its CLEAN units; as the queue filled again the
// spans went into those CLEAN units, 21 of them (1.3 MiB more resident)
// while the drained slot's 2 MiB waited RETAINED.  Looked for on the dirty
// list (every slot with RETAINED units; a slot with only LAZY units is not
// on it) and the lazy list, at most kFitScan slots of each from the most
// recently freed; the window is the fewest CLEAN units, then the lowest.
// Looked for only while free_resident_hint_ says such a slot may exist: set
// when insert_free_run takes in a slot with resident free units, cleared by
// a look that finds none that pays (a heap that churns large blocks would
// otherwise walk up to 2 x kFitScan slots under the lock at every run that
// touches CLEAN units: large-churn-2t, 24 instructions more per operation).
// A slot that `owner` freed (SlotMeta::freed_by) comes before any other
// owner's, which the walk passes over until it has one of the owner's
// without CLEAN units, or has looked at kFitScan slots of each list.
bool Backend::choose_free_resident(unsigned n, unsigned fresh, unsigned owner, SlotMeta** slot,
                                   unsigned* idx) const {
  UnitFit best;
  bool best_foreign = true;
  SlotMeta* best_slot = nullptr;
  auto look = [&](SlotMeta* m) {
    if (m->kind != SlotKind::kFree) return;
    UnitFit f = fit_units(0, m->retained | m->lazy, n);
    if (!f.found() || f.fresh >= fresh) return;
    bool foreign = m->freed_by != owner;
    if (!best_slot || foreign < best_foreign || (foreign == best_foreign && f.fresh < best.fresh)) {
      best = f;
      best_foreign = foreign;
      best_slot = m;
    }
  };
  auto done = [&] { return best_slot && !best_foreign && best.fresh == 0; };
  unsigned scanned = 0;
  for (SlotMeta* m = dirty_tail_; m && scanned < kFitScan && !done(); m = m->dirty_prev, ++scanned) look(m);
  scanned = 0;
  for (SlotMeta* m = lazy_tail_; m && scanned < kFitScan && !done(); m = m->lazy_prev, ++scanned) look(m);
  if (!best_slot) return false;
  *slot = best_slot;
  *idx = best.index;
  return true;
}

// The window of `n` units from the top of `p`'s free units into the next
// slot (index + n > kUnitsPerSlot), or nothing.  The hole runs from p's
// highest used unit to the next slot's lowest used unit; the next slot must
// be cut into units already.  Into a free slot, a run would always beat a
// fresh slot by the units it saves at the top of `p`, so the heap would
// creep upwards slot by slot, away from the slots below that emptied
// (a simulation of large-churn-1t: 56 MiB touched, against 12 without
// straddling and 10-11 with it into unit slots only).  Windows that fit in
// one slot are fit_units's.
UnitFit Backend::straddle_fit(const SlotMeta* p, unsigned n) const {
  UnitFit f;
  if (p->used == 0 || n < 2) return f;
  SlotMeta* q = neighbor(const_cast<SlotMeta*>(p), 1);
  if (!q || q->kind != SlotKind::kUnits || q->used == 0 || q->sparse || q->owner != p->owner) return f;
  unsigned top = unsigned(__builtin_clz(p->used));
  unsigned bottom = ctz32(q->used);
  if (top == 0 || bottom == 0 || top + bottom < n) return f;
  unsigned spare = top + bottom - n;
  uint32_t p_res = p->retained | p->lazy;
  uint32_t q_res = q->retained | q->lazy;
  // The hole's low end (straddles when top < n), then its high end
  // (straddles when bottom < n).
  unsigned lows[2] = {kUnitsPerSlot - top, kUnitsPerSlot + bottom - n};
  for (unsigned k = 0; k < 2; ++k) {
    unsigned at = lows[k];
    if (at + n <= kUnitsPerSlot || at >= kUnitsPerSlot) continue;
    UnitFit w;
    w.index = at;
    unsigned below = kUnitsPerSlot - at;
    w.fresh = popcount32(bit_range(at, below) & ~p_res) + popcount32(bit_range(0, n - below) & ~q_res);
    w.spare = spare;
    if (!f.found() || w.better_than(f)) f = w;
  }
  return f;
}

// The slots and unit masks a unit run covers: one part, or two when it
// runs from the top of its slot into the next one.
unsigned Backend::unit_parts(const Span* s, SlotMeta* slots[2], uint32_t masks[2]) const {
  unsigned below = kUnitsPerSlot - s->first_unit;
  slots[0] = s->slot;
  if (s->nunits <= below) {
    masks[0] = bit_range(s->first_unit, s->nunits);
    return 1;
  }
  masks[0] = bit_range(s->first_unit, below);
  slots[1] = neighbor(s->slot, 1);
  masks[1] = bit_range(0, s->nunits - below);
  return 2;
}

// A slot taken from the free runs (a run's first slot) to be cut into units.
void Backend::take_unit_slot(SlotMeta* head) {
  head->kind = SlotKind::kUnits;
  ++unit_slots_;
  head->used = 0;
  head->purging = 0;
}

// The last (`top`) or the first slot of the largest free run (as a rule,
// the newest arena's free top), carved from it.  Sparse slots gather at its
// top, away from the slots that the other spans fill from the bottom (best
// fit, address order); a growing block takes its first slot, with the rest
// of the run above it to grow into (alloc_units).
SlotMeta* Backend::take_run_end(bool top) {
  if (!bin_mask_) return nullptr;
  SlotMeta* head = bins_[63 - __builtin_clzll(bin_mask_)];
  SlotMeta* m = top ? head + (head->run_len - 1) : head;
  carve_run(head, m, 1);
  return m;
}

// MADV_NOHUGEPAGE for one slot, once, whatever the arenas' (admit may
// advise them all later: advise_arenas_huge re-advises such slots after):
// a sparse slot's, and a growing block's slot while it is all CLEAN.  No
// advice at all with hugepages off.
void Backend::advise_slot_nohuge(SlotMeta* m) {
  if (!hugepages_ || m->nohuge) return;
  platform_->advise_hugepage(platform_->ctx, reinterpret_cast<void*>(m->base), kSlotSize, false);
  m->nohuge = true;
  m->thp = false;
}

// A slot of other spans that was advised MADV_NOHUGEPAGE on its own gets
// the arenas' advice back while they carry it (where reuse_scope() keeps
// fresh slots on 4 KiB pages, once its memory has been given back).
void Backend::advise_slot_dense(SlotMeta* m, bool small) {
  if (!m->nohuge || !huge_arenas_ || !may_advise_huge(*m, small)) return;
  platform_->advise_hugepage(platform_->ctx, reinterpret_cast<void*>(m->base), kSlotSize, true);
  m->nohuge = false;
  count_own_advice();
}

void Backend::count_own_advice() {
  if (reuse_scope_ == kReuseNone) return;
  ++own_advice_;
  stats_->add(Stat::hugepage_own_advice, 1);
}

Span* Backend::alloc_units(unsigned n, bool fresh_slot, bool may_grow, bool straddle, bool sparse, unsigned owner,
                           bool claims, Span* rec) {
  if (owner > kOwners) owner = 0;
  const unsigned opens_as = claims ? owner : 0;  // the owner of a slot the run opens
  SlotMeta* m = nullptr;
  unsigned idx = 0;
  UnitFit fit;
  bool placed = !fresh_slot && choose_units(n, straddle, sparse, owner, claims, &m, &idx, &fit);
  SlotMeta* slot = nullptr;  // a free slot the run opens as a unit slot
  if (!fresh_slot && !sparse && (!placed || fit.fresh > 0) && free_resident_hint_) {
    if (choose_free_resident(n, placed ? fit.fresh : fit_units(0, 0, n).fresh, opens_as, &slot, &idx)) {
      carve_run(run_head(slot), slot, 1);
      placed = true;
    } else {
      free_resident_hint_ = false;  // none that pays now: no look until another slot empties
    }
  }
  if (!placed) {
    // A free slot, carved: a sparse span's at the top of the largest free
    // run, a growing block's at its bottom (the rest of the run is its room
    // to grow in place, and a block that grew there and was freed leaves
    // that run's bottom resident for the next), any other run's the
    // smallest fit.
    auto take_slot = [&]() -> SlotMeta* {
      if (sparse || fresh_slot) return take_run_end(sparse);
      SlotMeta* head = take_free_run(1);
      if (head) carve_run(head, head, 1);
      return head;
    };
    slot = take_slot();
    if (!slot && !fresh_slot && choose_any_owner(n, sparse, &m, &idx)) {
      stats_->add(Stat::foreign_slot_runs, 1);
      placed = true;
    } else if (!slot) {
      if (!may_grow || !add_arena(1, kSlotSize)) return nullptr;
      slot = take_slot();
      if (!slot) return nullptr;
    }
    if (slot) idx = 0;
  }
  if (slot) {
    take_unit_slot(slot);
    slot->owner = uint8_t(opens_as);
    slot->sparse = sparse;
    // A growing block opens a slot of its own, where it may stay small: on
    // a CLEAN slot the arenas' hugepage advice would fault in 2 MiB for it
    // (100 blocks realloc'ed to 300 KiB held 2 MiB each).  The advice comes
    // back if it becomes huge (resize: advise_slots_huge).  A slot with
    // resident units keeps its pages, and its advice (realloc-grow reuses
    // one each cycle: no madvise).
    bool small_pages = sparse || (fresh_slot && !(slot->retained | slot->lazy));
    if (small_pages) advise_slot_nohuge(slot); else advise_slot_dense(slot, !claims);
    m = slot;
  }
  Span* s = span_record(rec);
  if (!s) {
    if (m->used == 0) insert_free_run(m, 1);
    return nullptr;
  }
  s->slot = m;
  s->first_unit = idx;
  s->nunits = n;
  SlotMeta* parts[2];
  uint32_t masks[2];
  unsigned np = unit_parts(s, parts, masks);
  bool zero = true;
  for (unsigned k = 0; k < np; ++k) {
    SlotMeta* q = parts[k];
    zero = zero && ((q->retained | q->lazy) & masks[k]) == 0;
    account_take(q, masks[k]);
    q->used |= masks[k];
    if (q->used == kAllUnits) partial_remove(q); else partial_add(q);
    for (uint32_t b = masks[k]; b; b &= b - 1) q->unit_span[ctz32(b)] = s;
  }
  s->zero = zero;
  s->start = reinterpret_cast<char*>(m->base + size_t(idx) * kUnitSize);
  s->bytes = size_t(n) * kUnitSize;
  s->nslots = 0;
  s->kind = SpanKind::kLarge;
  return s;
}

Span* Backend::alloc_slots(size_t nslots, size_t align, bool may_grow) {
  size_t extra = align > kSlotSize ? align / kSlotSize - 1 : 0;
  size_t need = nslots + extra;
  if (need < nslots) return nullptr;
  SlotMeta* head = take_free_run(need);
  if (!head) {
    if (!may_grow || !add_arena(need, align)) return nullptr;
    head = take_free_run(need);
    if (!head) return nullptr;
  }
  carve_run(head, head, need);
  if (extra) {
    uintptr_t aligned = align_up(head->base, align);
    size_t lead = (aligned - head->base) / kSlotSize;
    size_t trail = extra - lead;
    if (trail) insert_free_run(head + lead + nslots, trail);
    if (lead) insert_free_run(head, lead);
    head += lead;
  }
  Span* s = new_span();
  if (!s) {
    insert_free_run(head, nslots);
    return nullptr;
  }
  advise_slots_huge(head, nslots);  // before account_take: it reads what the slots held
  bool zero = true;
  for (size_t i = 0; i < nslots; ++i) {
    SlotMeta* m = head + i;
    zero = zero && (m->retained | m->lazy) == 0;
    account_take(m, kAllUnits);
    m->kind = SlotKind::kHuge;
    for (unsigned u = 0; u < kUnitsPerSlot; ++u) m->unit_span[u] = s;
  }
  s->zero = zero;
  s->start = reinterpret_cast<char*>(head->base);
  s->bytes = nslots * kSlotSize;
  s->slot = head;
  s->first_unit = 0;
  s->nunits = 0;
  s->nslots = nslots;
  s->kind = SpanKind::kHuge;
  stats_->add(Stat::huge_blocks, 1);
  pages_add(Stat::huge_bytes, s->bytes);
  stats_->add(Stat::huge_allocs, 1);
  return s;
}

Span* Backend::alloc(size_t bytes, size_t align, bool growing, bool may_grow, Span* give_back, unsigned owner) {
  if (bytes == 0) bytes = 1;
  uint64_t now = platform_->now_ns(platform_->ctx);
  LockGuard g(lock_);
  PublishOnExit publish{this};
  note_activity(now);
  // The first given-back block's record serves the new run: the record
  // pool has a lock of its own, which a free and an alloc would each take.
  Span* rec = nullptr;
  while (give_back) {
    Span* next = give_back->next;
    release_units(give_back, false, now);
    if (rec) spans_.free(give_back); else rec = give_back;
    give_back = next;
  }
  Span* s = nullptr;
  if (bytes <= kMaxRequest) {
    bool units = bytes <= kMaxLarge && align <= kUnitSize;
    size_t taken = units ? align_up(bytes, kUnitSize) : align_up(bytes, kSlotSize);
    if (admit(taken, !units)) {
      s = units ? alloc_units(unsigned(taken >> kUnitShift), growing, may_grow, true, false, owner, true, rec)
                : alloc_slots(taken >> kSlotShift, align, may_grow);
    }
  }
  if (rec && s != rec) spans_.free(rec);
  return s;
}

Span* Backend::alloc_units_span(unsigned units, bool sparse, unsigned owner) {
  uint64_t now = platform_->now_ns(platform_->ctx);
  LockGuard g(lock_);
  PublishOnExit publish{this};
  note_activity(now);
  if (units == 0 || units > kUnitsPerSlot || !admit(size_t(units) * kUnitSize, false)) return nullptr;
  return alloc_units(units, false, true, false, sparse, owner, false, nullptr);
}

void Backend::note_activity(uint64_t now) {
  now_ = now;
  __atomic_store_n(&last_activity_ns_, now, __ATOMIC_RELAXED);
}

bool Backend::admit(size_t more, bool huge) {
  uint64_t active = pages_.active.get() + more;
  uint64_t hard = hard_limit();
  if (hard && active > hard) {
    stats_->add(Stat::limit_failures, 1);
    return false;
  }
  if (LM_UNLIKELY(hugepages_ && !huge_arenas_) && hugepages_pay(active, huge ? more : 0)) advise_arenas_huge();
  return true;
}

// Hugepage advice: every arena, present and future, as a whole (one call
// per arena: no mapping is split) while the policy says hugepages pay
// (SlotPolicy::hugepages_pay, purge/policy.h: from a threshold of active
// bytes, and while the unit slots are dense enough that khugepaged would
// not fill purged holes back in); withdrawn after a purge when they no
// longer do.  A huge block's slots are advised when it is allocated
// whatever the heap's size (it is one block, touched whole or nearly).
// The facts: active bytes (with `active`, those about to be; `more_huge`:
// how many of those go to a huge block, not to unit slots), and what the
// unit slots really hold, resident and not purged (active less huge blocks
// and the pages purged inside spans, plus the RETAINED free units: a
// purge's holes are what khugepaged fills, memory freed and kept is not),
// against the unit slots' size.
bool Backend::hugepages_pay(uint64_t active, uint64_t more_huge) const {
  uint64_t huge = pages_.huge.get() + more_huge;
  uint64_t in_units = active > huge ? active - huge : 0;
  uint64_t purged = pages_.span_purged.get();
  uint64_t held = (in_units > purged ? in_units - purged : 0) + pages_.retained.get();
  return policy_->hugepages_pay(huge_arenas_, active, held, uint64_t(unit_slots_) * kSlotSize);
}

// The slots that keep 4 KiB pages under the arenas' advice get
// MADV_NOHUGEPAGE: one call per run of them after the arena's.
void Backend::advise_arenas_huge() {
  __atomic_store_n(&huge_arenas_, true, __ATOMIC_RELAXED);  // arenas_huge() reads it unlocked
  stats_->set(Stat::hugepage_advice, 1);
  for (Arena* a = arenas_; a; a = a->next) {
    platform_->advise_hugepage(platform_->ctx, reinterpret_cast<void*>(a->base), a->nslots * kSlotSize, true);
    size_t i = 0;
    while (i < a->nslots) {
      if (!keeps_small_pages(a->slots[i])) {
        a->slots[i++].nohuge = false;
        continue;
      }
      size_t j = i;
      do {
        a->slots[j++].nohuge = true;
      } while (j < a->nslots && keeps_small_pages(a->slots[j]));
      stats_->add(Stat::hugepage_thin_slots, j - i);
      platform_->advise_hugepage(platform_->ctx, reinterpret_cast<void*>(a->slots[i].base), (j - i) * kSlotSize,
                                 false);
      i = j;
    }
  }
}

// Whether slot `m` keeps its 4 KiB pages when the arenas are advised: a
// sparse slot always; a slot already touched (cut into units, or holding
// resident free units, or being purged) unless what is resident in it now
// (Platform::resident_pages) makes its collapse by khugepaged pay
// (SlotPolicy::touched_slot_pays).  Free slots with no resident units and
// huge blocks take the advice; where reuse_scope() keeps fresh slots on
// 4 KiB pages, a free slot only once it has been used (a large or huge
// block's gets the advice when it is opened, where that scope is small
// spans only).
bool Backend::keeps_small_pages(const SlotMeta& m) {
  if (m.sparse) return true;
  if (m.kind == SlotKind::kHuge) return false;
  if (m.kind == SlotKind::kFree && (m.retained | m.lazy) == 0) return !may_advise_huge(m, true);
  long pages = platform_->resident_pages(platform_->ctx, reinterpret_cast<void*>(m.base), kSlotSize);
  if (pages < 0) return false;  // unknown: as before, the arena's advice
  return !policy_->touched_slot_pays(uint64_t(pages) * kOsPageSize, kSlotSize);
}

// One call per run of slots that are not part of a huge block (those stay
// advised, and are marked so, as advise_slots_huge would have).
void Backend::withdraw_arenas_huge() {
  __atomic_store_n(&huge_arenas_, false, __ATOMIC_RELAXED);  // arenas_huge() reads it unlocked
  stats_->set(Stat::hugepage_advice, 0);
  stats_->add(Stat::hugepage_withdrawals, 1);
  for (Arena* a = arenas_; a; a = a->next) {
    size_t i = 0;
    while (i < a->nslots) {
      if (a->slots[i].kind == SlotKind::kHuge) {
        a->slots[i].thp = !a->slots[i].nohuge;  // as the arena's advice left it
        ++i;
        continue;
      }
      size_t j = i;
      while (j < a->nslots && a->slots[j].kind != SlotKind::kHuge) {
        a->slots[j].nohuge = true;
        a->slots[j++].thp = false;
      }
      platform_->advise_hugepage(platform_->ctx, reinterpret_cast<void*>(a->slots[i].base), (j - i) * kSlotSize,
                                 false);
      i = j;
    }
  }
}

void Backend::review_hugepages_locked() {
  if (huge_arenas_ && !hugepages_pay(pages_.active.get())) withdraw_arenas_huge();
}

void Backend::review_hugepages() {
  LockGuard g(lock_);
  review_hugepages_locked();
}

void Backend::advise_slots_huge(SlotMeta* first, size_t n) {
  if (!hugepages_) return;
  // One call per run of slots not yet advised (an arena's slots are
  // consecutive in its SlotMeta array and in the address space); with the
  // arenas advised, only the slots advised MADV_NOHUGEPAGE on their own
  // (sparse slots that went back) need it.
  auto needs = [&](const SlotMeta& m) { return (huge_arenas_ ? m.nohuge : !m.thp) && may_advise_huge(m, false); };
  size_t i = 0;
  while (i < n) {
    if (!needs(first[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n && needs(first[j])) {
      first[j].nohuge = false;
      first[j++].thp = true;
    }
    platform_->advise_hugepage(platform_->ctx, reinterpret_cast<void*>(first[i].base), (j - i) * kSlotSize, true);
    count_own_advice();
    i = j;
  }
}

// ---------------------------------------------------------- release

void Backend::slot_units_to_free_run(SlotMeta* m, uint64_t) {
  partial_remove(m);
  insert_free_run(m, 1);
}

void Backend::release_slots(SlotMeta* first, size_t n, uint64_t now, bool clean) {
  for (size_t i = 0; i < n; ++i) {
    SlotMeta* m = first + i;
    for (unsigned u = 0; u < kUnitsPerSlot; ++u) m->unit_span[u] = nullptr;
    m->retained = clean ? 0 : kAllUnits;
    m->lazy = 0;
    lazy_remove(m);
    dirty_touch(m, now);
  }
  pages_sub(Stat::active_bytes, n * kSlotSize);
  pages_add(clean ? Stat::clean_bytes : Stat::retained_bytes, n * kSlotSize);
  insert_free_run(first, n);
}

void Backend::release_huge_stats(const Span* s) {
  stats_->sub(Stat::huge_blocks, 1);
  pages_sub(Stat::huge_bytes, s->bytes);
}

uint64_t Backend::release(Span* s, bool contents_gone) {
  uint64_t now = platform_->now_ns(platform_->ctx);
  {
    LockGuard g(lock_);
    PublishOnExit publish{this};
    note_activity(now);
    // nslots tells slot runs from unit runs (the frontend relabels kinds).
    if (s->nslots) {
      release_huge_stats(s);
      release_slots(s->slot, s->nslots, now, contents_gone);
    } else {
      release_units(s, contents_gone, now);
    }
  }
  spans_.free(s);
  return now;
}

void Backend::release_units(Span* s, bool contents_gone, uint64_t now) {
  SlotMeta* parts[2];
  uint32_t masks[2];
  unsigned np = unit_parts(s, parts, masks);
  for (unsigned k = 0; k < np; ++k) {
    SlotMeta* m = parts[k];
    uint32_t mask = masks[k];
    for (uint32_t b = mask; b; b &= b - 1) m->unit_span[ctz32(b)] = nullptr;
    m->used &= ~mask;
    if (!contents_gone) m->retained |= mask;
    pages_sub(Stat::active_bytes, units_bytes(mask));
    pages_add(contents_gone ? Stat::clean_bytes : Stat::retained_bytes, units_bytes(mask));
    dirty_touch(m, now);
    if (m->used == 0) slot_units_to_free_run(m, now); else partial_add(m);
  }
}

bool Backend::release_huge(Span* s, uint64_t retain_budget, SlotRun* run, uint64_t* now_out) {
  uint64_t now = platform_->now_ns(platform_->ctx);
  *now_out = now;
  bool keep;
  {
    LockGuard g(lock_);
    PublishOnExit publish{this};
    note_activity(now);
    SlotMeta* first = s->slot;
    size_t n = s->nslots;
    keep = policy_->keep_huge(*first, s->bytes, pages_.retained.get(), retain_budget);
    release_huge_stats(s);
    if (keep) {
      release_slots(first, n, now, false);
    } else {
      // Out of circulation until each chunk is settled: kPurging slots are
      // in no list, so nothing can allocate them.  The units are counted
      // RETAINED (purge_finish moves them to LAZY or CLEAN) and marked as
      // being purged from RETAINED (purge_mask 0).
      for (size_t i = 0; i < n; ++i) {
        SlotMeta* m = first + i;
        for (unsigned u = 0; u < kUnitsPerSlot; ++u) m->unit_span[u] = nullptr;
        m->kind = SlotKind::kPurging;
        m->retained = 0;
        m->lazy = 0;
        lazy_remove(m);
        m->purging = kAllUnits;
        m->purge_mask = 0;
        m->free_ns = now;
      }
      purging_slots_ += n;
      pages_sub(Stat::active_bytes, s->bytes);
      pages_add(Stat::retained_bytes, s->bytes);
      run->first = first;
      run->nslots = n;
    }
  }
  spans_.free(s);
  return keep;
}

void Backend::run_batch(SlotMeta* first, size_t n, size_t max_range, PurgeBatch* b) {
  b->nranges = 0;
  b->nitems = 1;
  b->items[0] = {first, 0, uint32_t(n)};
  b->bytes = n * kSlotSize;
  size_t per = align_up(max_range < kSlotSize ? kSlotSize : max_range, kSlotSize) / kSlotSize;
  size_t need = (n + per - 1) / per;
  if (need > PurgeBatch::kMaxRanges) per = (n + PurgeBatch::kMaxRanges - 1) / PurgeBatch::kMaxRanges;
  for (size_t i = 0; i < n; i += per) {
    size_t k = n - i < per ? n - i : per;
    b->ranges[b->nranges++] = {reinterpret_cast<void*>(first[i].base), k * kSlotSize};
  }
}

// No lock: the units stay `used`, and only the caller holds them, so no
// one else reads or writes their unit map entries (span_of of a pointer
// into them would be a use after free).
Span* Backend::split_units(Span* s, unsigned units, Span* rec) {
  if (!(rec = span_record(rec))) return nullptr;
  rec->slot = s->slot;
  rec->first_unit = s->first_unit + units;
  rec->nunits = uint16_t(s->nunits - units);
  rec->start = s->start + size_t(units) * kUnitSize;
  rec->bytes = size_t(rec->nunits) * kUnitSize;
  rec->kind = SpanKind::kLarge;
  rec->zero = s->zero;
  rec->cached = s->cached;
  s->nunits = uint16_t(units);
  s->bytes = size_t(units) * kUnitSize;
  for (unsigned u = 0; u < rec->nunits; ++u) s->slot->unit_span[rec->first_unit + u] = rec;
  return rec;
}

Span* Backend::join_units(Span* lo, Span* hi) {
  for (unsigned u = 0; u < hi->nunits; ++u) lo->slot->unit_span[hi->first_unit + u] = lo;
  lo->nunits = uint16_t(lo->nunits + hi->nunits);
  lo->bytes += hi->bytes;
  lo->zero = lo->zero && hi->zero;
  return hi;
}

bool Backend::resize(Span* s, size_t bytes) {
  if (bytes == 0 || bytes > kMaxRequest) return false;
  uint64_t now = platform_->now_ns(platform_->ctx);
  LockGuard g(lock_);
  PublishOnExit publish{this};
  now_ = now;
  if (bytes > s->bytes && !admit(align_up(bytes, kUnitSize) - s->bytes, bytes > kMaxLarge)) return false;
  // A run across two slots keeps its size (realloc moves it).
  if (s->kind == SpanKind::kLarge && s->first_unit + s->nunits > kUnitsPerSlot) return false;
  if (s->kind == SpanKind::kLarge && bytes > kMaxLarge) {
    // A large block alone in its slot, from its first unit, becomes a huge
    // block of that slot in place (and may then grow into the next slots):
    // a buffer growing by realloc is never copied at the large/huge border.
    SlotMeta* m = s->slot;
    if (s->first_unit != 0 || m->used != bit_range(0, s->nunits) || m->purging) return false;
    uint32_t rest = ~m->used;
    if (rest) account_take(m, rest);
    partial_remove(m);
    m->used = 0;
    m->owner = 0;
    --unit_slots_;
    m->kind = SlotKind::kHuge;
    for (unsigned u = 0; u < kUnitsPerSlot; ++u) m->unit_span[u] = s;
    s->kind = SpanKind::kHuge;
    s->nslots = 1;
    s->nunits = 0;
    s->bytes = kSlotSize;
    stats_->add(Stat::huge_blocks, 1);
    pages_add(Stat::huge_bytes, kSlotSize);
    stats_->add(Stat::promotions, 1);
    advise_slots_huge(m, 1);
  }
  if (s->kind == SpanKind::kLarge) {
    // Within the slot: shrink by freeing tail units, grow into free ones.
    unsigned want = unsigned(align_up(bytes, kUnitSize) >> kUnitShift);
    unsigned have = s->nunits;
    SlotMeta* m = s->slot;
    if (want == have) return true;
    if (want < have) {
      uint32_t tail = bit_range(s->first_unit + want, have - want);
      for (unsigned u = want; u < have; ++u) m->unit_span[s->first_unit + u] = nullptr;
      m->used &= ~tail;
      m->retained |= tail;
      pages_sub(Stat::active_bytes, units_bytes(tail));
      pages_add(Stat::retained_bytes, units_bytes(tail));
      dirty_touch(m, now);
      partial_add(m);
    } else {
      if (s->first_unit + want > kUnitsPerSlot) return false;
      uint32_t grow = bit_range(s->first_unit + have, want - have);
      if (m->used & grow) return false;
      account_take(m, grow);
      m->used |= grow;
      if (m->used == kAllUnits) partial_remove(m);
      for (unsigned u = have; u < want; ++u) m->unit_span[s->first_unit + u] = s;
    }
    s->nunits = uint16_t(want);
    s->bytes = size_t(want) * kUnitSize;
    stats_->add(Stat::inplace_resizes, 1);
    return true;
  }
  if (s->kind != SpanKind::kHuge || bytes <= kMaxLarge) return false;
  size_t want = align_up(bytes, kSlotSize) >> kSlotShift;
  size_t have = s->nslots;
  if (want == have) return true;
  if (want < have) {
    release_slots(s->slot + want, have - want, now, false);
  } else {
    size_t add = want - have;
    SlotMeta* right = neighbor(s->slot, ptrdiff_t(have));
    if (!right || right->kind != SlotKind::kFree || right->run_len < add) return false;
    carve_run(right, right, add);
    advise_slots_huge(right, add);  // before account_take, as in alloc_slots
    for (size_t i = 0; i < add; ++i) {
      SlotMeta* m = right + i;
      account_take(m, kAllUnits);
      m->kind = SlotKind::kHuge;
      for (unsigned u = 0; u < kUnitsPerSlot; ++u) m->unit_span[u] = s;
    }
  }
  pages_sub(Stat::huge_bytes, s->bytes);
  s->nslots = want;
  s->bytes = want * kSlotSize;
  pages_add(Stat::huge_bytes, s->bytes);
  stats_->add(Stat::inplace_resizes, 1);
  return true;
}

void Backend::set_timeline(TimelinePage* page) {
  LockGuard g(lock_);
  timeline_ = page;
  if (page) publish_timeline();
}

void Backend::publish_timeline() {
  TimelinePage::Gauges v{};
  v.active = pages_.active.get();
  v.retained = pages_.retained.get();
  v.lazy = pages_.lazy.get();
  v.clean = pages_.clean.get();
  v.reserved = pages_.reserved.get();
  timeline_->publish(v);
}
}  // namespace lazymalloc
