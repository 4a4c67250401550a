// Discardable memory: blocks a program may let the engine throw away while
// it does not use them (regenerable caches), in the spirit of the volatile
// ranges (MARK_VOLATILE / MARK_NONVOLATILE) proposal for Linux, Android's
// ashmem unpinning and macOS's purgeable memory.  See docs/discardable.md.
//
// A block is LOCKED when allocated.  unlock() makes it UNLOCKED: from then on
// the engine may discard it (MADV_DONTNEED on its pages) under pressure, a
// limit, a purge or an explicit discard_all().  lock() makes it LOCKED again
// and says whether the contents survived.  Neither lock() nor unlock() makes
// a system call or takes a lock: each is one CAS on the block's state word.
//
// State word (one per block, in metadata outside the user's memory):
//
//   LOCKED      count << 2 | 0    locked `count` times (nested locks)
//   UNLOCKED    seq << 2 | 1      seq: global unlock sequence (LRU order)
//   DISCARDING  seq << 2 | 2      claimed by the discarder, madvise running
//   DISCARDED   3                 pages dropped: reads as zero
//
//   LOCKED --unlock (count 1)--> UNLOCKED --lock--> LOCKED (INTACT)
//                                   |
//                      discarder CAS (under lock_)
//                                   v
//                              DISCARDING --madvise--> DISCARDED --lock--> LOCKED (DISCARDED)
//
// The discarder claims a block by CAS from the exact UNLOCKED value it saw,
// so a lock() that wins the race keeps its contents, and a lock() that loses
// it waits (futex on `epoch_`) until the block is DISCARDED, then reports it:
// never a false "intact".  free() waits the same way, so no madvise can hit
// memory that has been handed out again.
//
// Memory: blocks are page-granular.  Blocks under 64 KiB are packed into
// 128 KiB chunks (a large backend span, 32 pages, first fit by a page mask);
// larger ones get a backend span of their own (rounded to 64 KiB, or to
// 2 MiB slots beyond 1 MiB).  Span::discard points at the chunk record, so a
// pointer is found in O(1) through the backend's page map.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/meta_pool.h"
#include "core/accounting.h"
#include "core/config.h"
#include "core/stats.h"
#include "pal/lock.h"
#include "pal/pal.h"
#include "purge/adviser.h"

namespace lazymalloc {

struct DiscardBlock;

inline constexpr unsigned kChunkPages = 32;                       // pages of a packed chunk
inline constexpr size_t kChunkBytes = kChunkPages * kOsPageSize;  // 128 KiB
inline constexpr size_t kPackedMax = kUnitSize - kOsPageSize;     // largest packed block (60 KiB)

// A backend span holding discardable blocks: packed (up to 32 page-granular
// blocks) or one block.
struct DiscardChunk {
  Span* span;
  uint32_t used;   // packed: pages in use
  bool packed;
  DiscardChunk* next;  // every packed chunk (first fit by `used`)
  DiscardChunk* prev;
  std::atomic<DiscardBlock*> at[kChunkPages];  // block starting at each page
};

struct DiscardBlock {
  std::atomic<uint64_t> state;
  char* addr;
  size_t bytes;  // page-rounded
  DiscardChunk* chunk;
  DiscardBlock* next;  // every live block (lock_)
  DiscardBlock* prev;
};

enum class LockResult : int { kIntact = 0, kDiscarded = 1, kInvalid = -1, kOverflow = -2 };


class Discardable {
 public:
  enum : uint64_t { kLocked = 0, kUnlocked = 1, kDiscarding = 2, kDiscarded = 3, kTagMask = 3 };
  static constexpr uint64_t kMaxLocks = (uint64_t(1) << 32) - 1;

  constexpr Discardable() = default;
  // `backend` and `stats` must outlive the component.
  // The advice path (vectored, with fallbacks) discards use.
  void set_adviser(Adviser* adviser) { adviser_ = adviser; }
  void init(Backend* backend, const Platform* platform, Stats* stats) {
    backend_ = backend;
    platform_ = platform;
    stats_ = stats;
  }

  // A locked block of at least `size` bytes (page-granular, page-aligned),
  // contents undefined; nullptr when out of memory.
  void* alloc(size_t size);
  // Frees a block in any state (waits for a discard in flight).  Returns
  // false if `p` is not a live block.  *released_ns is the backend's clock
  // reading if a span went back to it, else 0.
  bool free(void* p, uint64_t* released_ns);
  // kIntact, kDiscarded (contents lost: zero, see docs), kInvalid (not a
  // block), kOverflow (locked 2^32-1 times).
  LockResult lock(void* p);
  // false if `p` is not a block or is not locked.
  bool unlock(void* p);
  // Usable bytes of block `p` (page-rounded), 0 if it is not a block.
  size_t size(const void* p) const;

  // Discards unlocked blocks, least recently unlocked first, until `want`
  // bytes are discarded (~0: all), in batches of at most `max_batch` bytes
  // (at least one block) and 64 ranges, each batch one Platform::advise call
  // (MADV_DONTNEED).  Returns the bytes discarded.
  size_t discard(uint64_t want, size_t max_batch);
  // Discards the least recently unlocked blocks until at most `keep` bytes
  // are unlocked.
  size_t discard_down_to(uint64_t keep, size_t max_batch);
  // Bytes of live blocks that were discarded and not locked since (still
  // counted active by the backend, but not resident).
  uint64_t discarded_bytes() const { return acct_.discarded_bytes.get(); }
  // Bytes of live blocks, in any state.
  uint64_t live_bytes() const { return acct_.bytes.get(); }
  // Recomputes the locked / unlocked gauges (O(blocks)); called when the
  // statistics are read.
  void refresh_stats();
  // Tests: the state word of block `p` (0 if not a block).
  uint64_t state_of(const void* p) const;
  // Tests: threads inside lock() or free() waiting for a discard batch to
  // settle a DISCARDING block (registered before they sleep).
  uint32_t waiters() const { return waiters_.load(); }

  void fork_prepare() {
    pass_lock_.lock();
    lock_.lock();
    blocks_.lock().lock();
    chunks_.lock().lock();
  }
  void fork_parent() {
    chunks_.lock().unlock();
    blocks_.lock().unlock();
    lock_.unlock();
    pass_lock_.unlock();
  }
  void fork_child() {
    chunks_.lock().reset();
    blocks_.lock().reset();
    lock_.reset();
    pass_lock_.reset();
  }

 private:
  struct Claim {
    DiscardBlock* block;
    uint64_t seen;  // the UNLOCKED value claimed
  };
  static constexpr unsigned kMaxClaims = 64;

  DiscardBlock* find(const void* p) const;
  // Sleeps until a discard batch finishes (the block left DISCARDING).
  void wait_discard(const DiscardBlock* b, uint64_t seen);
  // REQUIRES lock_.  The oldest unlocked blocks covering `want` bytes (at
  // most kMaxClaims), claimed DISCARDING.  Returns how many.
  unsigned claim_oldest(uint64_t want, Claim* out);
  // Advises and settles one claimed batch; returns its bytes.
  size_t discard_batch(Claim* claims, unsigned n, size_t max_range);
  void set_block(DiscardBlock* b, DiscardChunk* c, unsigned page, size_t bytes);  // REQUIRES lock_
  DiscardChunk* new_chunk(size_t span_bytes, bool packed);                       // REQUIRES lock_
  void drop_chunk(DiscardChunk* c, uint64_t* released_ns);                       // REQUIRES lock_

  Backend* backend_ = nullptr;
  const Platform* platform_ = nullptr;
  Adviser* adviser_ = nullptr;  // advises the ranges (process_madvise, fallbacks); may be null
  Stats* stats_ = nullptr;  // reporting only: decisions read acct_
  DiscardAccounting acct_;
  Mutex pass_lock_;  // one discard pass at a time (held across madvise)
  Mutex lock_;       // block list, chunk list, allocation
  DiscardBlock* head_ = nullptr;
  DiscardChunk* packed_ = nullptr;  // oldest first
  DiscardChunk* packed_tail_ = nullptr;
  MetaPool<DiscardBlock> blocks_;
  MetaPool<DiscardChunk> chunks_;
  alignas(64) std::atomic<uint64_t> unlock_seq_{0};
  alignas(64) std::atomic<uint32_t> epoch_{0};  // bumped after every discard batch
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace lazymalloc
