// The backend's slot lists: free slot runs in size bins (boundary tags,
// coalescing, best fit), the dirty list (RETAINED units, oldest free
// first), the lazy list (LAZY units, oldest first) and the partial list
// (slots cut into units with free units).
#include "backend/backend.h"

#include <cstring>

#include "core/bits.h"
#include "core/options.h"

namespace lazymalloc {

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
  for (size_t i = 0; i < n; ++i) {
    if (first[i].kind == SlotKind::kUnits) --unit_slots_;
    if (first[i].retained | first[i].lazy) free_resident_hint_ = true;  // (choose_free_resident)
    // A slot back from a purge (kPurging, taken from the free runs, or a
    // huge block's, whose slots carve_run cleared) keeps what it had.
    if (first[i].kind != SlotKind::kPurging) first[i].freed_by = first[i].owner;
    first[i].owner = 0;
    first[i].kind = SlotKind::kFree;
    first[i].sparse = false;
  }
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

SlotMeta* Backend::run_head(SlotMeta* m) const {
  SlotMeta* head = m;
  while (SlotMeta* left = neighbor(head, -1)) {
    if (left->kind != SlotKind::kFree) break;
    head = left;
  }
  return head;
}

void Backend::run_cut(SlotMeta* head, SlotMeta* first, SlotMeta* last) {
  SlotMeta* end = head + head->run_len;
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
}

void Backend::carve_run(SlotMeta* head, SlotMeta* first, size_t n) {
  run_cut(head, first, first + (n - 1));
  for (size_t i = 0; i < n; ++i) {
    first[i].kind = SlotKind::kHuge;
    first[i].freed_by = 0;  // in use: whoever frees it next sets it (insert_free_run)
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

// The partial list is kept in address order, so that alloc_units's first
// fit is address-ordered: unit runs fill the lowest slots' holes, and the
// slots above empty out and go back whole.  Most recent first, as it was,
// spread a churning heap's spans over every slot it had touched (`mixed`:
// retained units scattered over 15 slots with 20 MiB active).  The walk is
// over partial slots only, as alloc_units's own.
void Backend::partial_add(SlotMeta* m) {
  if (m->in_partial) return;
  SlotMeta*& head = partial_[m->owner];
  SlotMeta* prev = nullptr;
  SlotMeta* next = head;
  while (next && next->base < m->base) {
    prev = next;
    next = next->part_next;
  }
  m->part_prev = prev;
  m->part_next = next;
  if (prev) prev->part_next = m; else head = m;
  if (next) next->part_prev = m;
  m->in_partial = true;
}

void Backend::partial_remove(SlotMeta* m) {
  if (!m->in_partial) return;
  if (m->part_prev) m->part_prev->part_next = m->part_next; else partial_[m->owner] = m->part_next;
  if (m->part_next) m->part_next->part_prev = m->part_prev;
  m->part_next = m->part_prev = nullptr;
  m->in_partial = false;
}
}  // namespace lazymalloc
