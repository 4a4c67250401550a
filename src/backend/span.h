// Span: a run of units inside one slot (a large block may run on into the
// next slot of its arena), or of whole slots, handed out by the
// backend.  The record lives in allocator metadata, never inside the memory
// it describes, so a user's overflow cannot reach it.
//
// Field ownership:
//   backend fields  written under the backend lock when the span is created
//                   or destroyed; read by anyone holding a live pointer into it.
//   frontend fields (small spans) written only by the thread that owns
//                   `heap`, except `xfree`, which other threads push to with
//                   CAS (see frontend/spans.cc for the protocol).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lazymalloc {

struct Heap;
struct SlotMeta;
struct DiscardChunk;

// A free small object: its first word links it; with checks its second
// word holds its free tag (frontend/checks.h).
struct Block {
  Block* next;
};

enum class SpanKind : uint8_t { kSmall, kLarge, kHuge };

// Low bits of Span::xfree.
enum : uintptr_t {
  kXfreeNormal = 0,   // owner collects remote frees when it needs them
  kXfreeNotify = 1,   // span is on its heap's full list: the next remote free
                      // must push the span onto the heap's delayed list
  kXfreeNotified = 2, // it has been pushed; later remote frees just add blocks
  kXfreeMask = 3,
};

// In-span purging (frontend/span_purge.cc): free pages inside a small span
// go back to the kernel; the free objects whose first byte lies in one are
// "dormant" (off every list) until the span revives the page.  One bit per
// group of 2^purge_group_shift pages, so that 128 bits cover 512 pages.
inline constexpr unsigned kSpanPurgeBits = 128;

// Four cache lines, so that the owner's writes and other threads' remote
// frees do not false-share: line 0 is written when the span is made and
// when the heap's holder carves objects or purges or revives pages
// (`check_limit`: read by every free), lines 1 and 2 only by whoever holds
// the owning heap (its thread in a slow path, or a collector that claimed
// it: frontend/heap.h; line 2 is read by the failure paths of free and
// realloc), line 3 by remote frees.
struct alignas(64) Span {
  // ---- line 0: identity (backend fields and the object geometry) ----
  char* start;
  size_t bytes;         // units * 64 KiB, or slots * 2 MiB
  Heap* heap;           // owner (small spans); large blocks: the heap that allocated it; else nullptr
  // 2^64 / obj_size rounded up: index and divisibility (frontend/checks.h,
  // block_pos).  0 in large and huge spans (records come zero-filled; only
  // span_new sets it): lm_free tells them apart by it, not by `kind`.
  uint64_t div_magic;
  uint32_t obj_size;    // bytes per object (the usable size)
  // Objects from this index on take free()'s failure path, which tests them
  // precisely: `reserved`, or the first dormant object's index while the
  // span has purged pages.  Here, not in line 2, as every free reads it
  // (relaxed atomic: written by the heap's holder, read by any thread).
  uint32_t check_limit;
  SlotMeta* slot;       // first slot
  size_t nslots;        // huge spans: slots in the run
  uint32_t first_unit;  // unit spans: first unit in `slot` and count (a large block may run on into the next slot)
  uint16_t nunits;
  uint8_t cls;          // size class
  SpanKind kind;

  // ---- lines 1 and 2: the owning heap's holder's (small spans) ----
  alignas(64) Block* free;  // allocation list
  Block* local_free;    // owner's frees, swapped into `free` when it runs dry
  uint32_t used;        // objects handed out and not yet known to be free
  uint32_t capacity;    // objects that fit
  Span* next;           // heap queue links
  Span* prev;
  Span* next_delayed;   // heap's delayed list link
  uint8_t in_full;      // on the heap's full list
  uint8_t zero;         // memory was zero when the backend handed it out
  uint8_t guard;        // large/huge (secure mode): last OS page is PROT_NONE
  uint8_t cached;       // large: freed, in a thread's large cache (frontend/large.cc)
  uint8_t sparse;       // small: a sparse span, in a slot of its own kind (frontend/spans.cc)
  // Small: the most `reserved` has been since the span was made (capacity
  // is at most 4096).  A span whose objects all came back starts again
  // from its first object (span_restart_if_empty, frontend/spans.cc): a
  // free of an object between `reserved` and this is a double free, not a
  // pointer never handed out.
  uint16_t carved_max;
  size_t lead;          // large/huge: the block starts at start + lead
  DiscardChunk* discard;  // large/huge spans of discardable blocks (purge/discard.h), else nullptr
  // Carving and in-span purging (small spans), by the heap's holder; the
  // failure paths of free and realloc read `reserved` and `purged` with
  // relaxed atomic loads.
  uint32_t reserved;    // objects carved so far (the rest not handed out since the span was made or restarted)
  uint32_t dormant;     // free objects left off the lists: first byte in a purged page group
  uint64_t purged[kSpanPurgeBits / 64];  // page groups purged and not revived since
  uint64_t purged_ns;   // platform clock at the last purge; 0 once a revival looked at it
  uint32_t purge_seen;  // `used` + 1 at the last purge pass that found nothing (0: none)
  uint8_t purge_group_shift;  // pages per bit of `purged`, log2
  uint8_t purge_shift;  // hysteresis: the span waits partial_decay_ms << purge_shift
  // Of `purged`, the groups given MADV_FREE (still resident until the
  // kernel needs the memory): the second stage turns them CLEAN (meaningful
  // only where `purged` is set).
  uint64_t lazy[kSpanPurgeBits / 64];

  // ---- line 3: other threads' ----
  alignas(64) std::atomic<uintptr_t> xfree;  // remote frees: Block* | state bits
  // Remote frees pushed since the owner last looked, so collecting needs no
  // walk of the list.  Incremented after the push, so it never counts a
  // block that is not yet free: `used` never drops below the live count.
  std::atomic<uint32_t> xfree_count;
};
static_assert(sizeof(Span) == 256, "Span: four cache lines");

}  // namespace lazymalloc
