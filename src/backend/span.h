// Span: a run of units inside one slot, or of whole slots, handed out by the
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

// Three cache lines, so that the owner's writes and other threads' remote
// frees do not false-share: line 0 is written when the span is made and
// when it carves objects (`reserved`, every 16 KiB; read by every free),
// line 1 only by the owning thread, line 2 by remote frees.
struct alignas(64) Span {
  // ---- line 0: identity (backend fields and the object geometry) ----
  char* start;
  size_t bytes;         // units * 64 KiB, or slots * 2 MiB
  Heap* heap;           // owner (small spans), nullptr otherwise
  uint64_t div_magic;   // 2^64 / obj_size rounded up: index and divisibility (frontend/checks.h, block_pos)
  uint32_t obj_size;    // bytes per object (the usable size)
  uint32_t reserved;    // objects carved so far (the rest were never touched);
                        // here, not in line 1, as remote frees read it
  SlotMeta* slot;       // first slot
  size_t nslots;        // huge spans: slots in the run
  uint32_t first_unit;  // unit spans: first unit and count within `slot`
  uint16_t nunits;
  uint8_t cls;          // size class
  SpanKind kind;

  // ---- line 1: the owning thread's (small spans) ----
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
  size_t lead;          // large/huge: the block starts at start + lead
  DiscardChunk* discard;  // large/huge spans of discardable blocks (purge/discard.h), else nullptr

  // ---- line 2: other threads' ----
  alignas(64) std::atomic<uintptr_t> xfree;  // remote frees: Block* | state bits
  // Remote frees pushed since the owner last looked, so collecting needs no
  // walk of the list.  Incremented after the push, so it never counts a
  // block that is not yet free: `used` never drops below the live count.
  std::atomic<uint32_t> xfree_count;
};

}  // namespace lazymalloc
