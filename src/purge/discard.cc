#include "purge/discard.h"

#include "purge/purger.h"

#include <climits>
#include <new>

#include "core/bits.h"

namespace lazymalloc {

namespace {
constexpr uint64_t kOneLock = uint64_t(1) << 2;  // LOCKED, count 1
inline uint64_t tag(uint64_t s) { return s & Discardable::kTagMask; }
}  // namespace

// ---------------------------------------------------------------- lookup

DiscardBlock* Discardable::find(const void* p) const {
  if (LM_UNLIKELY(!backend_ || !p)) return nullptr;
  Span* s = backend_->span_of(p);
  if (!s) return nullptr;
  DiscardChunk* c = s->discard;
  if (!c) return nullptr;
  size_t off = size_t(static_cast<const char*>(p) - s->start);
  if (off % kOsPageSize || off / kOsPageSize >= kChunkPages) return nullptr;
  DiscardBlock* b = c->at[off / kOsPageSize].load(std::memory_order_acquire);
  return b && b->addr == p ? b : nullptr;
}

size_t Discardable::size(const void* p) const {
  DiscardBlock* b = find(p);
  return b ? b->bytes : 0;
}

uint64_t Discardable::state_of(const void* p) const {
  DiscardBlock* b = find(p);
  return b ? b->state.load(std::memory_order_acquire) : 0;
}

// ---------------------------------------------------------------- allocation

DiscardChunk* Discardable::new_chunk(size_t span_bytes, bool packed) {
  DiscardChunk* c = chunks_.alloc(*backend_->platform(), stats_);
  if (!c) return nullptr;
  Span* s = backend_->alloc(span_bytes, kUnitSize);
  if (!s) {
    chunks_.free(c);
    return nullptr;
  }
  c->span = s;
  c->packed = packed;
  s->discard = c;
  if (packed) {  // appended: older chunks fill up first
    c->prev = packed_tail_;
    if (packed_tail_) packed_tail_->next = c;
    else packed_ = c;
    packed_tail_ = c;
  }
  return c;
}

void Discardable::drop_chunk(DiscardChunk* c, uint64_t* released_ns) {
  if (c->packed) {
    if (c->prev) c->prev->next = c->next;
    else packed_ = c->next;
    if (c->next) c->next->prev = c->prev;
    else packed_tail_ = c->prev;
  }
  c->span->discard = nullptr;
  *released_ns = backend_->release(c->span);
  chunks_.free(c);
}

void Discardable::set_block(DiscardBlock* b, DiscardChunk* c, unsigned page, size_t bytes) {
  b->addr = c->span->start + size_t(page) * kOsPageSize;
  b->bytes = bytes;
  b->chunk = c;
  b->state.store(kOneLock, std::memory_order_relaxed);
  b->prev = nullptr;
  b->next = head_;
  if (head_) head_->prev = b;
  head_ = b;
  c->at[page].store(b, std::memory_order_release);
  stats_->add(Stat::discardable_blocks, 1);
  stats_->add(Stat::discardable_bytes, bytes);
  acct_.bytes.add(bytes);
}

void* Discardable::alloc(size_t size) {
  if (size > kMaxRequest) return nullptr;
  size_t bytes = align_up(size ? size : 1, kOsPageSize);
  LockGuard g(lock_);
  DiscardBlock* b = blocks_.alloc(*backend_->platform(), stats_);
  if (!b) return nullptr;
  if (bytes > kPackedMax) {
    DiscardChunk* c = new_chunk(bytes, false);
    if (!c) {
      blocks_.free(b);
      return nullptr;
    }
    set_block(b, c, 0, bytes);
    return b->addr;
  }
  unsigned pages = unsigned(bytes / kOsPageSize);
  DiscardChunk* c = packed_;
  int page = -1;
  for (; c; c = c->next) {
    page = find_zero_run(c->used, pages);
    if (page >= 0) break;
  }
  if (!c) {
    c = new_chunk(kChunkBytes, true);
    if (!c) {
      blocks_.free(b);
      return nullptr;
    }
    page = 0;
  }
  c->used |= bit_range(unsigned(page), pages);
  set_block(b, c, unsigned(page), bytes);
  return b->addr;
}

bool Discardable::free(void* p, uint64_t* released_ns) {
  *released_ns = 0;
  for (;;) {
    lock_.lock();
    DiscardBlock* b = find(p);
    if (!b) {
      lock_.unlock();
      return false;
    }
    uint64_t s = b->state.load(std::memory_order_acquire);
    if (tag(s) == kDiscarding) {
      // The discarder is advising it: its madvise must not reach memory
      // handed out again.  It claims blocks only under lock_, so once it is
      // done, this block stays put.
      lock_.unlock();
      wait_discard(b, s);
      continue;
    }
    b->state.store(0, std::memory_order_relaxed);
    if (tag(s) == kDiscarded) {
      stats_->sub(Stat::discardable_discarded_bytes, b->bytes);
      acct_.discarded_bytes.sub(b->bytes);
    }
    stats_->sub(Stat::discardable_blocks, 1);
    stats_->sub(Stat::discardable_bytes, b->bytes);
    acct_.bytes.sub(b->bytes);
    if (b->prev) b->prev->next = b->next;
    else head_ = b->next;
    if (b->next) b->next->prev = b->prev;
    DiscardChunk* c = b->chunk;
    size_t page = size_t(b->addr - c->span->start) / kOsPageSize;
    c->at[page].store(nullptr, std::memory_order_release);
    if (c->packed) c->used &= ~bit_range(unsigned(page), unsigned(b->bytes / kOsPageSize));
    if (!c->packed || c->used == 0) drop_chunk(c, released_ns);
    blocks_.free(b);
    lock_.unlock();
    return true;
  }
}

// ---------------------------------------------------------------- lock / unlock

void Discardable::wait_discard(const DiscardBlock* b, uint64_t seen) {
  // The discarder stores the block's final state, bumps epoch_, then wakes
  // if it sees a waiter; all seq_cst, so either it sees us or we see it.
  waiters_.fetch_add(1);
  uint32_t e = epoch_.load();
  if (b->state.load() == seen) platform_->wait(platform_->ctx, &epoch_, e, -1);
  waiters_.fetch_sub(1);
}

LockResult Discardable::lock(void* p) {
  DiscardBlock* b = find(p);
  if (LM_UNLIKELY(!b)) return LockResult::kInvalid;
  uint64_t s = b->state.load(std::memory_order_relaxed);
  for (;;) {
    switch (tag(s)) {
      case kUnlocked:
        if (LM_LIKELY(b->state.compare_exchange_weak(s, kOneLock, std::memory_order_acquire,
                                                     std::memory_order_relaxed))) {
          return LockResult::kIntact;
        }
        break;
      case kLocked:
        if (s == 0) return LockResult::kInvalid;  // being freed
        if ((s >> 2) >= kMaxLocks) return LockResult::kOverflow;
        if (b->state.compare_exchange_weak(s, s + kOneLock, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
          return LockResult::kIntact;
        }
        break;
      case kDiscarded:
        if (b->state.compare_exchange_weak(s, kOneLock, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
          stats_->sub(Stat::discardable_discarded_bytes, b->bytes);
          acct_.discarded_bytes.sub(b->bytes);
          return LockResult::kDiscarded;
        }
        break;
      default:  // kDiscarding: the madvise is running; its outcome is ours
        wait_discard(b, s);
        s = b->state.load(std::memory_order_relaxed);
        break;
    }
  }
}

bool Discardable::unlock(void* p) {
  DiscardBlock* b = find(p);
  if (LM_UNLIKELY(!b)) return false;
  uint64_t s = b->state.load(std::memory_order_relaxed);
  uint64_t unlocked = 0;
  for (;;) {
    if (tag(s) != kLocked || s == 0) return false;
    uint64_t next;
    if (s == kOneLock) {
      // Last unlock: stamp the LRU sequence (taken once, even if the CAS
      // retries).  A load and a store, not an atomic increment: threads
      // unlocking at the same moment may share a number (a tie in the LRU
      // order, harmless), and unlock stays at one locked instruction.
      if (!unlocked) {
        uint64_t seq = unlock_seq_.load(std::memory_order_relaxed) + 1;
        unlock_seq_.store(seq, std::memory_order_relaxed);
        unlocked = (seq << 2) | kUnlocked;
      }
      next = unlocked;
    } else {
      next = s - kOneLock;
    }
    if (LM_LIKELY(b->state.compare_exchange_weak(s, next, std::memory_order_release,
                                                 std::memory_order_relaxed))) {
      return true;
    }
  }
}

// ---------------------------------------------------------------- discarding

unsigned Discardable::claim_oldest(uint64_t want, Claim* out) {
  // Keep the oldest candidates sorted by sequence, and only as many as it
  // takes to cover `want`.
  unsigned n = 0;
  uint64_t bytes = 0;  // of out[0..n)
  for (DiscardBlock* b = head_; b; b = b->next) {
    uint64_t s = b->state.load(std::memory_order_relaxed);
    if (tag(s) != kUnlocked) continue;
    if (n == kMaxClaims) {
      if (s >= out[n - 1].seen) continue;
      bytes -= out[--n].block->bytes;  // evict the youngest
    }
    unsigned i = n++;
    while (i > 0 && out[i - 1].seen > s) {
      out[i] = out[i - 1];
      --i;
    }
    out[i] = {b, s};
    bytes += b->bytes;
    // Drop the youngest while the rest still covers `want`.
    while (n > 1 && bytes - out[n - 1].block->bytes >= want) bytes -= out[--n].block->bytes;
  }
  unsigned claimed = 0;
  for (unsigned i = 0; i < n; ++i) {
    uint64_t seen = out[i].seen;
    // Fails if the block was locked since the scan: it stays the owner's.
    if (out[i].block->state.compare_exchange_strong(seen, (seen & ~kTagMask) | kDiscarding,
                                                    std::memory_order_acq_rel)) {
      out[claimed++] = out[i];
    }
  }
  return claimed;
}

size_t Discardable::discard_batch(Claim* claims, unsigned n, size_t max_range) {
  AdviseRange ranges[PurgeBatch::kMaxRanges];
  unsigned nr = 0;
  int rc = 0;
  unsigned calls = 0;
  size_t bytes = 0;
  uint64_t t0 = platform_->now_ns(platform_->ctx);
  auto flush = [&] {
    if (nr == 0) return;
    unsigned c = 0;
    int r = 0;
    if (adviser_) {
      r = adviser_->advise_ranges(ranges, nr, Advice::kDontNeed, &c);
    } else {
      for (unsigned i = 0; i < nr; ++i, ++c) {
        if (int e = platform_->advise(platform_->ctx, ranges[i].addr, ranges[i].len, Advice::kDontNeed)) r = e;
      }
    }
    calls += c;
    if (r) rc = r;
    nr = 0;
  };
  for (unsigned i = 0; i < n; ++i) {
    DiscardBlock* b = claims[i].block;
    bytes += b->bytes;
    for (size_t off = 0; off < b->bytes; off += max_range) {
      if (nr == PurgeBatch::kMaxRanges) flush();
      size_t len = b->bytes - off < max_range ? b->bytes - off : max_range;
      ranges[nr++] = {b->addr + off, len};
    }
  }
  flush();
  stats_->add(Stat::purge_ns, platform_->now_ns(platform_->ctx) - t0);
  stats_->add(Stat::purge_dontneed_calls, calls);
  if (rc) {
    // The kernel refused (mlocked memory): some pages may have been dropped
    // and some not.  The blocks are reported DISCARDED all the same (never a
    // false "intact"); their contents are undefined.
    stats_->add(Stat::purge_failures, 1);
  } else {
    stats_->add(Stat::purge_dontneed_bytes, bytes);
  }
  for (unsigned i = 0; i < n; ++i) claims[i].block->state.store(kDiscarded);
  stats_->add(Stat::discards, n);
  stats_->add(Stat::discarded_bytes, bytes);
  stats_->add(Stat::discardable_discarded_bytes, bytes);
  acct_.discarded_bytes.add(bytes);
  epoch_.fetch_add(1);
  if (waiters_.load()) platform_->wake(platform_->ctx, &epoch_);
  return bytes;
}

size_t Discardable::discard(uint64_t want, size_t max_batch) {
  if (!backend_ || want == 0) return 0;
  if (max_batch == 0) max_batch = kChunkBytes;
  LockGuard pass(pass_lock_);
  uint64_t total = 0;
  Claim claims[kMaxClaims];
  while (total < want) {
    uint64_t left = want - total;
    unsigned n;
    {
      LockGuard g(lock_);
      n = claim_oldest(left < max_batch ? left : max_batch, claims);
    }
    if (n == 0) break;
    total += discard_batch(claims, n, max_batch);
  }
  return size_t(total);
}

size_t Discardable::discard_down_to(uint64_t keep, size_t max_batch) {
  if (!backend_) return 0;
  uint64_t unlocked = 0;
  {
    LockGuard g(lock_);
    for (DiscardBlock* b = head_; b; b = b->next) {
      if (tag(b->state.load(std::memory_order_relaxed)) == kUnlocked) unlocked += b->bytes;
    }
  }
  return unlocked > keep ? discard(unlocked - keep, max_batch) : 0;
}

void Discardable::refresh_stats() {
  if (!backend_) return;
  uint64_t locked = 0, unlocked = 0;
  LockGuard g(lock_);
  for (DiscardBlock* b = head_; b; b = b->next) {
    uint64_t t = tag(b->state.load(std::memory_order_relaxed));
    if (t == kLocked) locked += b->bytes;
    else if (t != kDiscarded) unlocked += b->bytes;
  }
  stats_->set(Stat::discardable_locked_bytes, locked);
  stats_->set(Stat::discardable_unlocked_bytes, unlocked);
}

}  // namespace lazymalloc
