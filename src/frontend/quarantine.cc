// Secure mode's quarantine: freed small objects wait in their heap's FIFO
// (heap.h, kQuarantineSlots and kQuarantineBytes) before they go back on a
// free list (docs/design.md, "Secure mode").
#include <cstring>

#include "frontend/internal.h"

namespace lazymalloc::detail {

namespace {

// Secure mode: a quarantined object leaves the FIFO for its free list.
void quarantine_release(Heap* h, void* p) {
  Span* s = g.backend.span_of(p);
  h->quarantine_bytes -= s->obj_size;
  return_object(h, s, p);
}

}  // namespace

void quarantine_flush(Heap* h) {
  // Empty (always outside secure mode): nothing to walk, as at most
  // thread exits.
  if (h->quarantine_bytes == 0) return;
  for (unsigned k = 0; k < kQuarantineSlots; ++k) {
    void* p = h->quarantine[k];
    h->quarantine[k] = nullptr;
    if (p) quarantine_release(h, p);
  }
  h->quarantine_next = 0;
}

// Secure mode's small free, after lm_free's checks: fill with 0xdf, tag,
// and hold in the heap's FIFO (at most kQuarantineSlots objects and
// kQuarantineBytes) before it goes on a free list.
void secure_free(Heap* h, Span* s, void* p) {
  memset(p, 0xdf, s->obj_size);
  set_free_tag(p);  // after the fill
  if (h == &g_empty_heap) {
    return_object(h, s, p);
    return;
  }
  unsigned k = h->quarantine_next;
  void* oldest = h->quarantine[k];
  h->quarantine[k] = p;
  h->quarantine_next = (k + 1) % kQuarantineSlots;
  h->quarantine_bytes += s->obj_size;
  if (oldest) quarantine_release(h, oldest);
  while (h->quarantine_bytes > kQuarantineBytes) {
    unsigned j = h->quarantine_next;
    void* q = h->quarantine[j];
    h->quarantine[j] = nullptr;
    h->quarantine_next = (j + 1) % kQuarantineSlots;
    if (q) quarantine_release(h, q);
  }
}

}  // namespace lazymalloc::detail
