// The backend's self-check (tests, lazymalloc_check): every list, mask and
// counter agrees with the others; and the page-state gauges.
#include "backend/backend.h"

#include <cstring>

#include "core/bits.h"
#include "core/options.h"

namespace lazymalloc {

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
  size_t partial = 0;
  for (unsigned k = 0; k <= kOwners; ++k) {
    for (SlotMeta* m = partial_[k]; m; m = m->part_next) {
      if (!m->in_partial) return "slot on the partial list without in_partial";
      if (m->owner != k) return "slot on another owner's partial list";
      if (m->part_next && m->part_next->base <= m->base) return "partial list out of address order";
      if (++partial > (size_t(1) << 30)) return "cycle in the partial list";
    }
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
      if (m->kind != SlotKind::kUnits && m->owner) return "slot not cut into units with an owner";
      switch (m->kind) {
        case SlotKind::kFree:
          if (m->used) return "free slot with used units";
          if (m->sparse) return "free slot marked sparse";
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
  // The books that decisions read and the statistics that report them.
  for (Stat s : {Stat::reserved_bytes, Stat::active_bytes, Stat::retained_bytes, Stat::lazy_bytes, Stat::clean_bytes,
                 Stat::huge_bytes}) {
    if (page_gauge(s).get() != stats_->get(s)) return "page accounting disagrees with the statistics";
  }
  return nullptr;
}

MemoryState Backend::memory_state() const {
  return {pages_.reserved.get(), pages_.active.get(), pages_.retained.get(), pages_.lazy.get(),
          pages_.clean.get()};
}

}  // namespace lazymalloc
