#include "backend/backend.h"

#include <cstring>

#include "core/bits.h"
#include "core/options.h"

namespace lazymalloc {

namespace {
constexpr uint32_t kAllUnits = ~uint32_t{0};
inline uint64_t units_bytes(uint32_t mask) { return uint64_t(popcount32(mask)) * kUnitSize; }
}  // namespace

void Backend::init(const Platform* platform, Stats* stats, size_t arena_reserve, bool hugepages) {
  platform_ = platform;
  stats_ = stats;
  arena_reserve_ = align_up(arena_reserve < 2 * kSlotSize ? 2 * kSlotSize : arena_reserve, kSlotSize);
  hugepages_ = hugepages;
}

SlotMeta* Backend::neighbor(SlotMeta* m, ptrdiff_t delta) const {
  Arena* a = m->arena;
  ptrdiff_t j = (m - a->slots) + delta;
  if (j < 0 || size_t(j) >= a->nslots) return nullptr;
  return &a->slots[j];
}

bool Backend::owns_address(const void* p) const {
  uintptr_t slot = reinterpret_cast<uintptr_t>(p) >> kSlotShift;
  if (slot >= (uintptr_t(1) << (kAddressBits - kSlotShift))) return false;
  return slot_leaf(slot >> kLeafBits)[slot & (kLeafSize - 1)] != nullptr;
}

Span* Backend::new_span() { return spans_.alloc(*platform_, stats_); }

// ---------------------------------------------------------------- arenas

void* Backend::map_leaf(size_t bytes) {
  void* p = platform_->map(platform_->ctx, bytes);
  stats_->add(Stat::mmap_calls, 1);
  if (p) {
    stats_->add(Stat::metadata_bytes, bytes);
  } else {
    stats_->add(Stat::mmap_failures, 1);
  }
  return p;
}

bool Backend::register_arena(Arena* a) {
  uintptr_t first = a->base >> kSlotShift;
  for (size_t i = 0; i < a->nslots; ++i) {
    uintptr_t idx = first + i;
    bool in_range = idx < (uintptr_t(1) << (kAddressBits - kSlotShift));
    SlotMeta** leaf = in_range ? slot_leaf(idx >> kLeafBits) : nullptr;
    Span** unit_leaf = in_range ? this->unit_leaf(idx >> kLeafBits) : nullptr;
    if (unit_leaf == g_empty_unit_leaf) {
      // 2 MiB of which only the pages for units in use are touched: never
      // a transparent huge page.
      unit_leaf = static_cast<Span**>(map_leaf(kUnitLeafSize * sizeof(Span*)));
      if (unit_leaf) {
        platform_->advise_hugepage(platform_->ctx, unit_leaf, kUnitLeafSize * sizeof(Span*), false);
        __atomic_store_n(&unit_root_[idx >> kLeafBits],
                         reinterpret_cast<uintptr_t>(unit_leaf) - reinterpret_cast<uintptr_t>(g_empty_unit_leaf),
                         __ATOMIC_RELEASE);
      }
    }
    if (leaf == g_empty_leaf && unit_leaf) {
      // Zero-filled: every entry says "no slot".
      leaf = static_cast<SlotMeta**>(map_leaf(kLeafSize * sizeof(SlotMeta*)));
      if (leaf) {
        __atomic_store_n(&root_[idx >> kLeafBits],
                         reinterpret_cast<uintptr_t>(leaf) - reinterpret_cast<uintptr_t>(g_empty_leaf),
                         __ATOMIC_RELEASE);
      }
    }
    if (!leaf || !unit_leaf) {
      // Out of the address range or of memory for a leaf: forget the slots
      // registered so far, whose records the caller is about to unmap (the
      // leaves stay, for later arenas).
      for (size_t j = 0; j < i; ++j) {
        uintptr_t k = first + j;
        slot_leaf(k >> kLeafBits)[k & (kLeafSize - 1)] = nullptr;
      }
      return false;
    }
    leaf[idx & (kLeafSize - 1)] = &a->slots[i];
    a->slots[i].unit_span = unit_leaf + (idx & (kLeafSize - 1)) * kUnitsPerSlot;
  }
  return true;
}

Arena* Backend::add_arena(size_t min_slots, size_t align) {
  size_t min_bytes = min_slots * kSlotSize;
  if (min_slots == 0 || min_bytes / kSlotSize != min_slots || min_bytes > kMaxRequest) return nullptr;
  if (align < kSlotSize) align = kSlotSize;
  // Arenas grow from kFirstArena to arena_reserve_, doubling: a small
  // program's slot records (one SlotMeta per slot, all written here) fit in
  // a page.  A request larger than half an arena gets an arena of its own
  // size, so a one-off giant block does not leave a giant reservation behind
  // it.
  // (grown_ stops once the size reaches arena_reserve_: the shift cannot
  // overflow.)
  size_t regular = kFirstArena << grown_;
  if (regular > arena_reserve_) regular = arena_reserve_;
  bool own = min_bytes > regular / 2;
  size_t want = own ? min_bytes : regular;
  void* p = nullptr;
  for (;;) {
    p = platform_->reserve(platform_->ctx, want, align);
    stats_->add(Stat::mmap_calls, 1);
    if (p) break;
    stats_->add(Stat::mmap_failures, 1);
    if (want == min_bytes) return nullptr;
    want = align_up(want / 2, kSlotSize);
    if (want < min_bytes) want = min_bytes;
  }
  size_t nslots = want / kSlotSize;
  size_t meta_bytes = align_up(nslots * sizeof(SlotMeta), 4096);
  auto* slots = static_cast<SlotMeta*>(platform_->map(platform_->ctx, meta_bytes));
  stats_->add(Stat::mmap_calls, 1);
  if (!slots) stats_->add(Stat::mmap_failures, 1);
  Arena* a = slots ? arena_records_.alloc(*platform_, stats_) : nullptr;
  if (a) {
    a->base = reinterpret_cast<uintptr_t>(p);
    a->nslots = nslots;
    a->slots = slots;
    for (size_t i = 0; i < nslots; ++i) {
      slots[i].arena = a;
      slots[i].base = a->base + i * kSlotSize;
    }
    if (!register_arena(a)) {
      arena_records_.free(a);
      a = nullptr;
    }
  }
  if (!a) {
    // Out of memory for metadata: give the reservation back.
    if (slots) platform_->unmap(platform_->ctx, slots, meta_bytes);
    platform_->unmap(platform_->ctx, p, want);
    return nullptr;
  }
  stats_->add(Stat::metadata_bytes, meta_bytes);
  if (huge_arenas_) platform_->advise_hugepage(platform_->ctx, p, want, true);
  a->next = arenas_;
  arenas_ = a;
  stats_->add(Stat::arenas, 1);
  if (!own && regular < arena_reserve_) ++grown_;
  stats_->add(Stat::reserved_bytes, want);
  stats_->add(Stat::clean_bytes, want);
  insert_free_run(&slots[0], nslots);
  return a;
}

// ---------------------------------------------------------- free-run bins

unsigned Backend::bin_of(size_t n) {
  if (n <= 32) return unsigned(n - 1);
  unsigned b = 32 + log2_floor(n - 1) - 5;
  return b < kBins ? b : kBins - 1;
}

void Backend::bin_push(SlotMeta* head) {
  unsigned b = bin_of(head->run_len);
  head->free_prev = nullptr;
  head->free_next = bins_[b];
  if (bins_[b]) bins_[b]->free_prev = head;
  bins_[b] = head;
  bin_mask_ |= uint64_t(1) << b;
}

void Backend::bin_unlink(SlotMeta* head) {
  unsigned b = bin_of(head->run_len);
  if (head->free_prev) {
    head->free_prev->free_next = head->free_next;
  } else {
    bins_[b] = head->free_next;
    if (!bins_[b]) bin_mask_ &= ~(uint64_t(1) << b);
  }
  if (head->free_next) head->free_next->free_prev = head->free_prev;
  head->free_next = head->free_prev = nullptr;
}

void Backend::insert_free_run(SlotMeta* first, size_t n) {
  for (size_t i = 0; i < n; ++i) first[i].kind = SlotKind::kFree;
  SlotMeta* head = first;
  size_t len = n;
  SlotMeta* left = neighbor(first, -1);
  if (left && left->kind == SlotKind::kFree) {
    size_t ll = left->run_len;
    SlotMeta* lh = left - (ll - 1);
    bin_unlink(lh);
    head = lh;
    len += ll;
  }
  SlotMeta* right = neighbor(first, ptrdiff_t(n));
  if (right && right->kind == SlotKind::kFree) {
    size_t rl = right->run_len;
    bin_unlink(right);
    len += rl;
  }
  head->run_len = uint32_t(len);
  head[len - 1].run_len = uint32_t(len);
  bin_push(head);
}

SlotMeta* Backend::take_free_run(size_t n) {
  unsigned b = bin_of(n);
  if (b < 32) {
    // Exact bins: every run in bin b' >= b is long enough.
    uint64_t m = bin_mask_ & (~uint64_t(0) << b) & 0xffffffffull;
    if (m) return bins_[__builtin_ctzll(m)];
    b = 32;
  }
  for (; b < kBins; ++b) {
    if (!(bin_mask_ & (uint64_t(1) << b))) continue;
    for (SlotMeta* h = bins_[b]; h; h = h->free_next) {
      if (h->run_len >= n) return h;
    }
  }
  return nullptr;
}

void Backend::carve_run(SlotMeta* head, size_t n) {
  bin_unlink(head);
  size_t len = head->run_len;
  for (size_t i = 0; i < n; ++i) head[i].kind = SlotKind::kHuge;
  if (len > n) {
    SlotMeta* rest = head + n;
    rest->run_len = uint32_t(len - n);
    head[len - 1].run_len = uint32_t(len - n);
    bin_push(rest);
  }
}

// ---------------------------------------------------------- lists

void Backend::dirty_remove(SlotMeta* m) {
  if (!m->in_dirty) return;
  if (m->dirty_prev) m->dirty_prev->dirty_next = m->dirty_next; else dirty_head_ = m->dirty_next;
  if (m->dirty_next) m->dirty_next->dirty_prev = m->dirty_prev; else dirty_tail_ = m->dirty_prev;
  m->dirty_next = m->dirty_prev = nullptr;
  m->in_dirty = false;
}

void Backend::dirty_touch(SlotMeta* m, uint64_t now) {
  dirty_remove(m);
  m->free_ns = now;
  m->suppressed = false;
  if (!m->retained) return;  // the dirty list holds only slots with RETAINED units
  m->dirty_prev = dirty_tail_;
  m->dirty_next = nullptr;
  if (dirty_tail_) dirty_tail_->dirty_next = m; else dirty_head_ = m;
  dirty_tail_ = m;
  m->in_dirty = true;
}

void Backend::lazy_remove(SlotMeta* m) {
  if (!m->lazy) lazy_unlink(m);
}

void Backend::lazy_unlink(SlotMeta* m) {
  if (!m->in_lazy) return;
  if (m->lazy_prev) m->lazy_prev->lazy_next = m->lazy_next; else lazy_head_ = m->lazy_next;
  if (m->lazy_next) m->lazy_next->lazy_prev = m->lazy_prev; else lazy_tail_ = m->lazy_prev;
  m->lazy_next = m->lazy_prev = nullptr;
  m->in_lazy = false;
}

void Backend::lazy_touch(SlotMeta* m, uint64_t now) {
  // To the tail with the new stamp: the list stays ordered by lazy_ns (the
  // slot's older LAZY units wait with its newest, as free_ns does).
  lazy_unlink(m);
  // Stamps taken by threads before the lock may arrive out of order.
  if (lazy_tail_ && now < lazy_tail_->lazy_ns) now = lazy_tail_->lazy_ns;
  m->lazy_ns = now;
  if (!m->lazy) return;
  m->lazy_prev = lazy_tail_;
  m->lazy_next = nullptr;
  if (lazy_tail_) lazy_tail_->lazy_next = m; else lazy_head_ = m;
  lazy_tail_ = m;
  m->in_lazy = true;
}

void Backend::partial_add(SlotMeta* m) {
  if (m->in_partial) return;
  m->part_prev = nullptr;
  m->part_next = partial_;
  if (partial_) partial_->part_prev = m;
  partial_ = m;
  m->in_partial = true;
}

void Backend::partial_remove(SlotMeta* m) {
  if (!m->in_partial) return;
  if (m->part_prev) m->part_prev->part_next = m->part_next; else partial_ = m->part_next;
  if (m->part_next) m->part_next->part_prev = m->part_prev;
  m->part_next = m->part_prev = nullptr;
  m->in_partial = false;
}

// ---------------------------------------------------------- allocation

// Moves the units in `mask` (all free) from their page state to active.
void Backend::account_take(SlotMeta* m, uint32_t mask) {
  uint32_t purged = mask & ~m->retained;
  if (purged && m->purged_ns) {
    // Hysteresis bookkeeping: was the purge of this slot premature?
    uint64_t since = now_ > m->purged_ns ? now_ - m->purged_ns : 0;
    int64_t base_ms = option(m->lazy_purged ? Opt::lazy_decay_ms : Opt::decay_ms);
    uint64_t decay = (uint64_t(base_ms) * 1000000) << m->decay_shift;
    if (since < decay) {
      stats_->add(Stat::refaults, 1);
      stats_->add(Stat::refault_bytes, units_bytes(purged));
      if (m->decay_shift < kMaxDecayShift) m->decay_shift++;
    } else if (since > 8 * decay && m->decay_shift) {
      m->decay_shift--;
    }
    m->purged_ns = 0;
  }
  uint64_t r = units_bytes(mask & m->retained);
  uint64_t l = units_bytes(mask & m->lazy);
  uint64_t all = units_bytes(mask);
  stats_->sub(Stat::retained_bytes, r);
  stats_->sub(Stat::lazy_bytes, l);
  stats_->sub(Stat::clean_bytes, all - r - l);
  stats_->add(Stat::active_bytes, all);
  stats_->add(Stat::reuse_retained_bytes, r);
  stats_->add(Stat::reuse_lazy_bytes, l);
  stats_->add(Stat::reuse_clean_bytes, all - r - l);
  m->retained &= ~mask;
  m->lazy &= ~mask;
  if (!m->retained) dirty_remove(m);
  lazy_remove(m);
}

Span* Backend::alloc_units(unsigned n, bool fresh_slot, bool may_grow) {
  SlotMeta* m = nullptr;
  int idx = -1;
  for (SlotMeta* p = fresh_slot ? nullptr : partial_; p; p = p->part_next) {
    idx = find_zero_run(p->used, n);
    if (idx >= 0) {
      m = p;
      break;
    }
  }
  if (!m) {
    SlotMeta* head = take_free_run(1);
    if (!head) {
      if (!may_grow || !add_arena(1, kSlotSize)) return nullptr;
      head = take_free_run(1);
      if (!head) return nullptr;
    }
    carve_run(head, 1);
    m = head;
    m->kind = SlotKind::kUnits;
    m->used = 0;
    m->purging = 0;
    idx = 0;
  }
  Span* s = new_span();
  if (!s) {
    if (m->used == 0) insert_free_run(m, 1);
    return nullptr;
  }
  uint32_t mask = bit_range(unsigned(idx), n);
  s->zero = ((m->retained | m->lazy) & mask) == 0;
  account_take(m, mask);
  m->used |= mask;
  if (m->used == kAllUnits) partial_remove(m); else partial_add(m);
  s->start = reinterpret_cast<char*>(m->base + size_t(idx) * kUnitSize);
  s->bytes = size_t(n) * kUnitSize;
  s->slot = m;
  s->first_unit = uint32_t(idx);
  s->nunits = n;
  s->nslots = 0;
  s->kind = SpanKind::kLarge;
  for (unsigned u = 0; u < n; ++u) m->unit_span[unsigned(idx) + u] = s;
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
  carve_run(head, need);
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
  bool zero = true;
  for (size_t i = 0; i < nslots; ++i) {
    SlotMeta* m = head + i;
    zero = zero && (m->retained | m->lazy) == 0;
    account_take(m, kAllUnits);
    m->kind = SlotKind::kHuge;
    for (unsigned u = 0; u < kUnitsPerSlot; ++u) m->unit_span[u] = s;
  }
  advise_slots_huge(head, nslots);
  s->zero = zero;
  s->start = reinterpret_cast<char*>(head->base);
  s->bytes = nslots * kSlotSize;
  s->slot = head;
  s->first_unit = 0;
  s->nunits = 0;
  s->nslots = nslots;
  s->kind = SpanKind::kHuge;
  stats_->add(Stat::huge_blocks, 1);
  stats_->add(Stat::huge_bytes, s->bytes);
  stats_->add(Stat::huge_allocs, 1);
  return s;
}

Span* Backend::alloc(size_t bytes, size_t align, bool growing, bool may_grow) {
  if (bytes == 0) bytes = 1;
  if (bytes > kMaxRequest) return nullptr;
  uint64_t now = platform_->now_ns(platform_->ctx);
  bool units = bytes <= kMaxLarge && align <= kUnitSize;
  size_t taken = units ? align_up(bytes, kUnitSize) : align_up(bytes, kSlotSize);
  LockGuard g(lock_);
  PublishOnExit publish{this};
  note_activity(now);
  if (!admit(taken)) return nullptr;
  if (units) return alloc_units(unsigned(taken >> kUnitShift), growing, may_grow);
  return alloc_slots(taken >> kSlotShift, align, may_grow);
}

Span* Backend::alloc_units_span(unsigned units) {
  uint64_t now = platform_->now_ns(platform_->ctx);
  LockGuard g(lock_);
  PublishOnExit publish{this};
  note_activity(now);
  if (units == 0 || units > kUnitsPerSlot || !admit(size_t(units) * kUnitSize)) return nullptr;
  return alloc_units(units, false, true);
}

void Backend::note_activity(uint64_t now) {
  now_ = now;
  __atomic_store_n(&last_activity_ns_, now, __ATOMIC_RELAXED);
}

bool Backend::admit(size_t more) {
  uint64_t active = stats_->get(Stat::active_bytes) + more;
  uint64_t hard = hard_limit();
  if (hard && active > hard) {
    stats_->add(Stat::limit_failures, 1);
    return false;
  }
  if (LM_UNLIKELY(hugepages_ && !huge_arenas_) && active >= uint64_t(option(Opt::hugepage_threshold))) {
    advise_arenas_huge();
  }
  return true;
}

// Hugepage advice.  A small heap stays on 4 KiB pages: a hugepage would
// make its first touch of a slot fault in 2 MiB.  Once active bytes reach
// Opt::hugepage_threshold every arena, present and future, is advised
// MADV_HUGEPAGE as a whole (one call per arena: no mapping is split), and
// slots not yet touched fault in hugepages from then on.  A huge block's
// slots are advised when it is allocated whatever the heap's size (it is
// one block, touched whole or nearly).
void Backend::advise_arenas_huge() {
  huge_arenas_ = true;
  for (Arena* a = arenas_; a; a = a->next) {
    platform_->advise_hugepage(platform_->ctx, reinterpret_cast<void*>(a->base), a->nslots * kSlotSize, true);
  }
}

void Backend::advise_slots_huge(SlotMeta* first, size_t n) {
  if (!hugepages_ || huge_arenas_) return;
  // One call per run of slots not yet advised (an arena's slots are
  // consecutive in its SlotMeta array and in the address space).
  size_t i = 0;
  while (i < n) {
    if (first[i].thp) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n && !first[j].thp) first[j++].thp = true;
    platform_->advise_hugepage(platform_->ctx, reinterpret_cast<void*>(first[i].base), (j - i) * kSlotSize, true);
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
  stats_->sub(Stat::active_bytes, n * kSlotSize);
  stats_->add(clean ? Stat::clean_bytes : Stat::retained_bytes, n * kSlotSize);
  insert_free_run(first, n);
}

void Backend::release_huge_stats(const Span* s) {
  stats_->sub(Stat::huge_blocks, 1);
  stats_->sub(Stat::huge_bytes, s->bytes);
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
      SlotMeta* m = s->slot;
      uint32_t mask = bit_range(s->first_unit, s->nunits);
      for (unsigned u = 0; u < s->nunits; ++u) m->unit_span[s->first_unit + u] = nullptr;
      m->used &= ~mask;
      if (!contents_gone) m->retained |= mask;
      stats_->sub(Stat::active_bytes, units_bytes(mask));
      stats_->add(contents_gone ? Stat::clean_bytes : Stat::retained_bytes, units_bytes(mask));
      dirty_touch(m, now);
      if (m->used == 0) slot_units_to_free_run(m, now); else partial_add(m);
    }
  }
  spans_.free(s);
  return now;
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
    // A pinned range (hysteresis at its cap) is kept unless the budget is 0
    // (pressure, limits, eager policy).
    uint8_t shift = first->decay_shift;
    uint64_t budget = shift >= kMaxDecayShift || retain_budget > (~uint64_t(0) >> shift)
                          ? ~uint64_t(0) : retain_budget << shift;
    keep = retain_budget && stats_->get(Stat::retained_bytes) + s->bytes <= budget;
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
      stats_->sub(Stat::active_bytes, s->bytes);
      stats_->add(Stat::retained_bytes, s->bytes);
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

bool Backend::resize(Span* s, size_t bytes) {
  if (bytes == 0 || bytes > kMaxRequest) return false;
  uint64_t now = platform_->now_ns(platform_->ctx);
  LockGuard g(lock_);
  PublishOnExit publish{this};
  now_ = now;
  if (bytes > s->bytes && !admit(align_up(bytes, kUnitSize) - s->bytes)) return false;
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
    m->kind = SlotKind::kHuge;
    for (unsigned u = 0; u < kUnitsPerSlot; ++u) m->unit_span[u] = s;
    s->kind = SpanKind::kHuge;
    s->nslots = 1;
    s->nunits = 0;
    s->bytes = kSlotSize;
    stats_->add(Stat::huge_blocks, 1);
    stats_->add(Stat::huge_bytes, kSlotSize);
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
      stats_->sub(Stat::active_bytes, units_bytes(tail));
      stats_->add(Stat::retained_bytes, units_bytes(tail));
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
    carve_run(right, add);
    for (size_t i = 0; i < add; ++i) {
      SlotMeta* m = right + i;
      account_take(m, kAllUnits);
      m->kind = SlotKind::kHuge;
      for (unsigned u = 0; u < kUnitsPerSlot; ++u) m->unit_span[u] = s;
    }
    advise_slots_huge(right, add);
  }
  stats_->sub(Stat::huge_bytes, s->bytes);
  s->nslots = want;
  s->bytes = want * kSlotSize;
  stats_->add(Stat::huge_bytes, s->bytes);
  stats_->add(Stat::inplace_resizes, 1);
  return true;
}

// ---------------------------------------------------------- purge mechanism

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
      return s->lazy && lazy_age >= slot_decay_ns(s, sel.min_age_lazy_ns, sel) ? s->lazy : 0;
    }
    uint64_t age = sel.now_ns > s->free_ns ? sel.now_ns - s->free_ns : 0;
    if (s->retained && age < slot_decay_ns(s, sel.min_age_free_ns, sel)) return 0;
    return s->retained | (sel.include_lazy ? s->lazy : 0);
  };
  SlotMeta* head = m;
  while (SlotMeta* left = neighbor(head, -1)) {
    if (left->kind != SlotKind::kFree) break;
    head = left;
  }
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
  bin_unlink(head);
  if (first > head) {
    head->run_len = uint32_t(first - head);
    (first - 1)->run_len = head->run_len;
    bin_push(head);
  }
  if (last + 1 < end) {
    SlotMeta* rest = last + 1;
    rest->run_len = uint32_t(end - rest);
    (end - 1)->run_len = rest->run_len;
    bin_push(rest);
  }
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

uint64_t Backend::slot_decay_ns(const SlotMeta* m, uint64_t base_ns, const PurgeSelect& sel) const {
  if (!sel.hysteresis || !m->decay_shift) return base_ns;
  if (m->decay_shift >= kMaxDecayShift) return ~uint64_t(0);  // pinned
  return base_ns << m->decay_shift;
}

bool Backend::batch_full(const PurgeSelect& sel, const PurgeBatch* b) {
  return b->bytes >= sel.max_bytes || b->nitems == PurgeBatch::kMaxItems ||
         b->nranges == PurgeBatch::kMaxRanges;
}

void Backend::purge_collect(const PurgeSelect& sel, PurgeBatch* b) {
  b->nranges = 0;
  b->nitems = 0;
  b->bytes = 0;
  b->lazy_stage = false;
  uint64_t min_age = sel.min_age_free_ns < sel.min_age_partial_ns ? sel.min_age_free_ns
                                                                  : sel.min_age_partial_ns;
  size_t max_range = sel.max_range < kUnitSize ? kUnitSize : sel.max_range;
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
    if ((units || m->kind == SlotKind::kFree) && age >= slot_decay_ns(m, base, sel)) {
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
  b->nranges = 0;
  b->nitems = 0;
  b->bytes = 0;
  b->lazy_stage = true;
  size_t max_range = sel.max_range < kUnitSize ? kUnitSize : sel.max_range;
  LockGuard g(lock_);
  SlotMeta* m = lazy_head_;
  while (m && !batch_full(sel, b)) {
    uint64_t age = sel.now_ns > m->lazy_ns ? sel.now_ns - m->lazy_ns : 0;
    if (age < sel.min_age_lazy_ns) break;  // the rest of the list is younger
    bool units = m->kind == SlotKind::kUnits;
    if ((units || m->kind == SlotKind::kFree) && age >= slot_decay_ns(m, sel.min_age_lazy_ns, sel)) {
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

uint64_t Backend::slot_due_ns(const SlotMeta* m, uint64_t stamp, uint64_t base_ns, const PurgeSelect& sel) {
  uint64_t plain = stamp + base_ns;
  if (!sel.hysteresis || !m->decay_shift) return plain;
  // Lengthened (or pinned) until the process turns idle, then plain decay.
  uint64_t longer = m->decay_shift >= kMaxDecayShift ? kNoDeadline : stamp + (base_ns << m->decay_shift);
  uint64_t idle = plain > sel.idle_ns ? plain : sel.idle_ns;
  return longer < idle ? longer : idle;
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
    uint64_t due = slot_due_ns(m, m->free_ns, units ? sel.min_age_partial_ns : sel.min_age_free_ns, sel);
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
    uint64_t due = slot_due_ns(m, m->lazy_ns, sel.min_age_lazy_ns, sel);
    if (due < best) best = due;
  }
  return best;
}

void Backend::purge_collect_all(const PurgeSelect& sel, PurgeCursor* cur, PurgeBatch* b) {
  b->nranges = 0;
  b->nitems = 0;
  b->bytes = 0;
  b->lazy_stage = false;
  size_t max_range = sel.max_range < kUnitSize ? kUnitSize : sel.max_range;
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
    stats_->sub(Stat::retained_bytes, from_retained);
    stats_->sub(Stat::lazy_bytes, from_lazy);
    if (made_clean) {
      stats_->add(Stat::clean_bytes, from_retained + from_lazy);
    } else {
      stats_->add(Stat::lazy_bytes, from_retained + from_lazy);
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
}

uint64_t Backend::oldest_retained_ns() {
  LockGuard g(lock_);
  return dirty_head_ ? dirty_head_->free_ns : 0;
}

const char* Backend::check_invariants() {
  LockGuard g(lock_);
  size_t dirty = 0;
  for (SlotMeta* m = dirty_head_; m; m = m->dirty_next) {
    if (!m->in_dirty) return "slot on the dirty list without in_dirty";
    if (!m->retained) return "slot on the dirty list without retained units";
    if (++dirty > (size_t(1) << 30)) return "cycle in the dirty list";
  }
  size_t lazy = 0;
  for (SlotMeta* m = lazy_head_; m; m = m->lazy_next) {
    if (!m->in_lazy) return "slot on the lazy list without in_lazy";
    if (!m->lazy) return "slot on the lazy list without lazy units";
    if (m->lazy_next && m->lazy_next->lazy_ns < m->lazy_ns) return "lazy list out of lazy_ns order";
    if (++lazy > (size_t(1) << 30)) return "cycle in the lazy list";
  }
  size_t lazy_flagged = 0;
  size_t flagged = 0;
  size_t purging = 0;
  for (Arena* a = arenas_; a; a = a->next) {
    for (size_t i = 0; i < a->nslots; ++i) {
      SlotMeta* m = &a->slots[i];
      flagged += m->in_dirty;
      lazy_flagged += m->in_lazy;
      if (m->retained & m->lazy) return "unit both retained and lazy";
      if (bool(m->lazy) && !m->in_lazy) return "lazy units but not on the lazy list";
      if (bool(m->retained) && !m->in_dirty) return "retained units but not on the dirty list";
      switch (m->kind) {
        case SlotKind::kFree:
          if (m->used) return "free slot with used units";
          for (unsigned u = 0; u < kUnitsPerSlot; ++u) {
            if (m->unit_span[u]) return "free slot still maps a span";
          }
          break;
        case SlotKind::kHuge:
          if (m->retained | m->lazy) return "huge slot with free units";
          for (unsigned u = 0; u < kUnitsPerSlot; ++u) {
            if (m->unit_span[u] != m->unit_span[0] || !m->unit_span[u]) return "huge slot not mapped to one span";
          }
          break;
        case SlotKind::kUnits:
          if ((m->retained | m->lazy) & m->used) return "used unit with a free state";
          for (unsigned u = 0; u < kUnitsPerSlot; ++u) {
            bool mapped = m->unit_span[u] != nullptr;
            bool used = (m->used & ~m->purging) >> u & 1;
            if (mapped != used) return "unit map disagrees with the used mask";
          }
          break;
        case SlotKind::kPurging:
          // Only while a purge batch or a huge release holds it.
          if (m->used || (m->retained & m->purging) || (m->lazy & m->purging)) {
            return "purging units still counted free or used";
          }
          for (unsigned u = 0; u < kUnitsPerSlot; ++u) {
            if (m->unit_span[u]) return "purging slot still maps a span";
          }
          ++purging;
          break;
      }
    }
  }
  if (flagged != dirty) return "in_dirty flags disagree with the dirty list";
  if (lazy_flagged != lazy) return "in_lazy flags disagree with the lazy list";
  if (purging != purging_slots_) return "slots left in kPurging (no purge or release holds them)";
  return nullptr;
}

void Backend::set_timeline(TimelinePage* page) {
  LockGuard g(lock_);
  timeline_ = page;
  if (page) publish_timeline();
}

void Backend::publish_timeline() {
  TimelinePage::Gauges v{};
  v.active = stats_->get(Stat::active_bytes);
  v.retained = stats_->get(Stat::retained_bytes);
  v.lazy = stats_->get(Stat::lazy_bytes);
  v.clean = stats_->get(Stat::clean_bytes);
  v.reserved = stats_->get(Stat::reserved_bytes);
  timeline_->publish(v);
}

MemoryState Backend::memory_state() const {
  return {stats_->get(Stat::reserved_bytes), stats_->get(Stat::active_bytes),
          stats_->get(Stat::retained_bytes), stats_->get(Stat::lazy_bytes),
          stats_->get(Stat::clean_bytes)};
}

}  // namespace lazymalloc
