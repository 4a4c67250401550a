// Size classes for small objects (<= kMaxSmall = 256 KiB).
//
// Classes 0..7 are 16..128 bytes in steps of 16; above that each power of two
// is split into four classes (160, 192, 224, 256, 320, ...), so internal
// waste is at most 25% and on average about 10%, except 4-8 KiB, split
// into eight (4608, 5120, ..., 8192; kFineFirst..kFineLast): a page and its
// header (sqlite's 4 KiB pages come with 272 bytes, its allocations with an
// 8-byte prefix) lost a fifth of a 5 KiB class (issue #16, fourteenth
// round); and 64-256 KiB, split into eight each (72 KiB, 80 KiB, ...,
// 256 KiB; kTopFirst on): Python's 70,000-byte buffers took 80 KiB each,
// resident whole under hugepages (issue #16, fifteenth round).  Every
// class size is a multiple of 16, and every power of two is
// a class, which is how aligned requests are served from small spans (see
// class_for_aligned).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/bits.h"
#include "core/config.h"

namespace lazymalloc {

// The eight classes above 4 KiB, 512 bytes apart (kFineFirst is 4608 B).
inline constexpr unsigned kFineFirst = 28, kFineLast = 35;
// The sixteen classes above 64 KiB, eight in each power of two
// (kTopFirst is 72 KiB).
inline constexpr unsigned kTopFirst = 48;
inline constexpr unsigned kSmallClasses = kTopFirst + 16;  // 64: the last is 256 KiB
inline constexpr size_t kDirectMax = 1024;                 // sizes with a direct lookup
inline constexpr unsigned kDirectSlots = kDirectMax / 16 + 1;

constexpr size_t class_size(unsigned c) {
  if (c < 8) return size_t(c + 1) * 16;
  if (c >= kFineFirst && c <= kFineLast) return 4096 + size_t(c - kFineFirst + 1) * 512;
  if (c >= kTopFirst) {
    const size_t base = size_t(65536) << ((c - kTopFirst) / 8);
    return base + size_t((c - kTopFirst) % 8 + 1) * (base / 8);
  }
  if (c > kFineLast) c -= 4;
  unsigned g = (c - 8) / 4, k = (c - 8) % 4;
  return (size_t(128) << g) + size_t(k + 1) * (size_t(32) << g);
}

// Class for a size in 1..kMaxSmall.
inline unsigned size_class(size_t size) {
  if (size <= 128) return size ? unsigned((size - 1) >> 4) : 0;
  size_t s = size - 1;
  unsigned b = log2_floor(s);  // >= 7
  if (b == 12) return kFineFirst + unsigned((s - 4096) >> 9);  // 4097..8192
  if (b >= 16) return kTopFirst + (b - 16) * 8 + unsigned((s >> (b - 3)) & 7);  // 64 KiB + 1..
  return 8 + (b - 7) * 4 + unsigned((s >> (b - 2)) & 3) + (b > 12 ? 4 : 0);
}

// Class whose size is a multiple of `align` (a power of two <= 64 KiB) and at
// least `size`; kSmallClasses if none is small.
inline unsigned class_for_aligned(size_t size, size_t align) {
  if (size > kMaxSmall) return kSmallClasses;
  if (align <= kMinAlign) return size_class(size);
  size_t want = align_up(size < align ? align : size, align);
  if (want > kMaxSmall) return kSmallClasses;
  unsigned c = size_class(want);
  if (class_size(c) % align == 0) return c;
  // Round up to the next power of two, which is always a class.
  size_t p = size_t(1) << (log2_floor(want - 1) + 1);
  return p <= kMaxSmall ? size_class(p) : kSmallClasses;
}

// Objects in a span of class `c`: 8, or for the classes above 16 KiB as
// many as fit in kSpanBigBytes, at least one.  A span is one of the
// backend's unit runs, and a slot (2 MiB) is one transparent hugepage once
// the heap is past hugepage_threshold: a slot any part of which is touched
// is resident whole.  Spans of 8 big objects (up to 2 MiB for 256 KiB) leave
// holes in the slots that other spans do not fit in, as they come and go;
// measured on `lazybench run mixed` (1% of its objects are 32-256 KiB):
// peak RSS 50-61 MiB with 8-object spans, 37 MiB with spans of at most
// 512 KiB, 33 MiB at 256 KiB and 31-35 MiB at 128 KiB, each faster than
// the one before (docs/benchmarks.md, "Big-class spans").
inline constexpr unsigned kSpanObjects = 8;
inline constexpr size_t kSpanBigBytes = size_t(128) << 10;
constexpr unsigned span_objects(unsigned c) {
  size_t n = kSpanBigBytes / class_size(c);
  return n >= kSpanObjects ? kSpanObjects : n < 1 ? 1 : unsigned(n);
}

// Units (64 KiB) in a span of class `c`: at least span_objects(c) objects
// and at most 1/8 of the span lost to the tail, in at most kSpanUnitsMax
// units; where no such span has so little tail (the 208 KiB class), the
// one of at most kSpanUnitsMax units with the least.
inline constexpr unsigned kSpanUnitsMax = 5;
constexpr unsigned span_units(unsigned c) {
  const size_t size = class_size(c);
  unsigned best = 0;
  for (unsigned n = 1; n <= kSpanUnitsMax; ++n) {
    const size_t bytes = size_t(n) * kUnitSize;
    if (bytes / size < span_objects(c)) continue;
    if ((bytes % size) * 8 <= bytes) return n;
    const size_t best_bytes = size_t(best) * kUnitSize;
    if (!best || (bytes % size) * best_bytes < (best_bytes % size) * bytes) best = n;
  }
  return best;
}

// Where an offset falls in a span of objects of one size, by one
// 64x64->128 multiplication with class_magic(size) = 2^64 / size rounded up
// (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019;
// exact for offsets and sizes below 2^32, and spans are at most 2 MiB): the
// high half of offset * magic is offset / size, and the low half is below
// the magic exactly when offset is a multiple of size.
constexpr uint64_t class_magic(size_t size) { return ~uint64_t(0) / size + 1; }

struct ObjectPos {
  uint64_t index;  // offset / size
  bool start;      // offset % size == 0
};
inline ObjectPos object_pos(uint64_t offset, uint64_t magic) {
  unsigned __int128 prod = static_cast<unsigned __int128>(offset) * magic;
  return {uint64_t(prod >> 64), uint64_t(prod) < magic};
}

static_assert(class_size(kSmallClasses - 1) == kMaxSmall);
static_assert(span_units(kSmallClasses - 1) == 4);  // one 256 KiB object
constexpr bool every_class_has_a_span() {
  for (unsigned c = 0; c < kSmallClasses; ++c)
    if (span_units(c) == 0) return false;
  return true;
}
static_assert(every_class_has_a_span());
static_assert(class_size(7) == 128 && class_size(8) == 160 && class_size(11) == 256);
static_assert(class_size(kFineFirst - 1) == 4096 && class_size(kFineFirst) == 4608 &&
              class_size(kFineLast) == 8192 && class_size(kFineLast + 1) == 10240);
static_assert(class_size(kTopFirst - 1) == 65536 && class_size(kTopFirst) == 73728 &&
              class_size(kTopFirst + 7) == 131072 && class_size(kTopFirst + 8) == 147456);

}  // namespace lazymalloc
