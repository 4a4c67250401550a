// Arenas and the page map: reserving an arena (halved on failure), entering
// its slots into the slot map and the unit map (leaves mapped on demand),
// slot neighbours and address ownership.
#include "backend/backend.h"

#include <cstring>

#include "core/bits.h"
#include "core/options.h"

namespace lazymalloc {

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

void* Backend::map_leaf(size_t bytes) {
  void* p = platform_->map(platform_->ctx, bytes);
  stats_->add(Stat::mmap_calls, 1);
  if (p) {
    stats_->add(Stat::metadata_mapped_bytes, bytes);
  } else {
    stats_->add(Stat::mmap_failures, 1);
  }
  return p;
}

// Whether none of the `per_page` slots that share a leaf page with slot
// `in` (its index in slot leaf `leaf`) is registered: a page of the slot
// leaf holds 512 slots' entries, one of the unit leaf 16 slots'.
static bool leaf_page_unwritten(SlotMeta* const* leaf, size_t in, size_t per_page) {
  size_t first = in & ~(per_page - 1);
  for (size_t j = first; j < first + per_page; ++j)
    if (leaf[j]) return false;
  return true;
}

bool Backend::register_arena(Arena* a) {
  // The leaves are mapped whole (kLeafSize slots' worth of address space)
  // and written only where arenas lie: a leaf page counts as metadata from
  // the first slot registered whose entries lie on it (a unit leaf page,
  // whether or not its units are in use yet).
  static constexpr size_t kSlotsPerLeafPage = kOsPageSize / sizeof(SlotMeta*);
  static constexpr size_t kSlotsPerUnitLeafPage = kOsPageSize / (kUnitsPerSlot * sizeof(Span*));
  static_assert(kSlotsPerUnitLeafPage >= 1 && kLeafSize % kSlotsPerLeafPage == 0);
  size_t written = 0;
  uintptr_t first = a->base >> kSlotShift;
  for (size_t i = 0; i < a->nslots; ++i) {
    uintptr_t idx = first + i;
    bool in_range = idx < (uintptr_t(1) << (kAddressBits - kSlotShift));
    SlotMeta** leaf = in_range ? slot_leaf(idx >> kLeafBits) : nullptr;
    Span** unit_leaf = in_range ? this->unit_leaf(idx >> kLeafBits) : nullptr;
    if (unit_leaf == empty_unit_leaf_) {
      // 2 MiB of which only the pages for units in use are touched: never
      // a transparent huge page.
      unit_leaf = static_cast<Span**>(map_leaf(kUnitLeafSize * sizeof(Span*)));
      if (unit_leaf) {
        platform_->advise_hugepage(platform_->ctx, unit_leaf, kUnitLeafSize * sizeof(Span*), false);
        __atomic_store_n(&unit_root_[idx >> kLeafBits],
                         reinterpret_cast<uintptr_t>(unit_leaf) - reinterpret_cast<uintptr_t>(empty_unit_leaf_),
                         __ATOMIC_RELEASE);
      }
    }
    if (leaf == empty_leaf_ && unit_leaf) {
      // Zero-filled: every entry says "no slot".
      leaf = static_cast<SlotMeta**>(map_leaf(kLeafSize * sizeof(SlotMeta*)));
      if (leaf) {
        __atomic_store_n(&root_[idx >> kLeafBits],
                         reinterpret_cast<uintptr_t>(leaf) - reinterpret_cast<uintptr_t>(empty_leaf_),
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
      return false;  // (nothing counted: `written` is added on success)
    }
    for (size_t per_page : {kSlotsPerLeafPage, kSlotsPerUnitLeafPage})
      if (leaf_page_unwritten(leaf, idx & (kLeafSize - 1), per_page)) written += kOsPageSize;
    leaf[idx & (kLeafSize - 1)] = &a->slots[i];
    a->slots[i].unit_span = unit_leaf + (idx & (kLeafSize - 1)) * kUnitsPerSlot;
  }
  stats_->add(Stat::metadata_bytes, written);
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
  stats_->add(Stat::metadata_mapped_bytes, meta_bytes);
  stats_->add(Stat::metadata_bytes, meta_bytes);  // every record written above
  if (huge_arenas_) {
    // Advised with the others, but for fresh address space that
    // reuse_scope() keeps on 4 KiB pages (whole: one call, no split; a
    // large or huge block's slot gets the advice when it is opened where
    // the scope is small spans only).
    bool fresh_small = reuse_scope() != kReuseNone;
    platform_->advise_hugepage(platform_->ctx, p, want, !fresh_small);
    for (size_t i = 0; i < nslots; ++i) a->slots[i].nohuge = fresh_small;
  }
  a->next = arenas_;
  arenas_ = a;
  stats_->add(Stat::arenas, 1);
  if (!own && regular < arena_reserve_) ++grown_;
  pages_add(Stat::reserved_bytes, want);
  pages_add(Stat::clean_bytes, want);
  insert_free_run(&slots[0], nslots);
  return a;
}
}  // namespace lazymalloc
