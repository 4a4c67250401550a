// lazymalloc — compile-time geometry.
//
// Glossary (used throughout the code):
//   slot   a 2 MiB, 2 MiB-aligned piece of address space: the unit of
//          hugepage backing and of the page map.  Every slot has a SlotMeta.
//   unit   a 64 KiB piece of a slot (32 per slot): the granule in which
//          small-object spans and large blocks are carved from a slot, and
//          the granule of page-state tracking.
//   span   a run of units (inside one slot; a large block may run on into
//          the next) or of whole slots (a huge block)
//          handed out by the backend.  A small span is cut into objects of
//          one size class; a large or huge span is one object.
//   arena  one contiguous reservation of address space, a whole number of
//          slots, registered in the page map for its lifetime.
//   heap   a per-thread cache of small spans (frontend).  Heaps outlive
//          threads: an exiting thread's heap goes to a pool and is adopted
//          by the next new thread.
//   page states of free memory (backend): RETAINED (resident, nothing told
//          to the kernel), LAZY (MADV_FREE: the kernel may take it), CLEAN
//          (MADV_DONTNEED or never touched: reads as zero).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lazymalloc {

inline constexpr size_t kOsPageSize = 4096;
inline constexpr unsigned kUnitShift = 16;
inline constexpr size_t kUnitSize = size_t{1} << kUnitShift;   // 64 KiB
inline constexpr unsigned kSlotShift = 21;
inline constexpr size_t kSlotSize = size_t{1} << kSlotShift;   // 2 MiB
inline constexpr unsigned kUnitsPerSlot = kSlotSize / kUnitSize;  // 32

// Objects up to kMaxSmall come from per-thread heaps; up to kMaxLarge they are
// unit runs inside a slot (or across the boundary into the next unit slot);
// beyond that they are runs of whole slots.
inline constexpr size_t kMaxSmall = 256 * 1024;
inline constexpr size_t kMaxLarge = 1024 * 1024;

// Owners of unit slots (Backend::alloc's `owner`): heaps are given owners
// 1..kOwners in turn, so that up to kOwners threads churning large blocks
// each reuse their own slots; 0 is shared.
inline constexpr unsigned kOwners = 64;

// Natural alignment of every malloc result (as glibc on x86-64).
inline constexpr size_t kMinAlign = 16;

// User address space covered by the page map (x86-64 / aarch64 4-level).
inline constexpr unsigned kAddressBits = 48;

// Double-free detection and free-list validation (CMake LAZYMALLOC_CHECKS,
// on by default; off only to measure what they cost).
#ifndef LAZYMALLOC_CHECKS
#define LAZYMALLOC_CHECKS 1
#endif
inline constexpr bool kChecks = LAZYMALLOC_CHECKS != 0;

// Largest request we ever try to satisfy (glibc refuses > PTRDIFF_MAX too).
inline constexpr size_t kMaxRequest = size_t{1} << 46;

}  // namespace lazymalloc
