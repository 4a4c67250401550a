// Fixed-size records (spans, heaps) carved from mapped chunks, with a free
// list.  Pools of records that tile a page (Span records: 16 to a page) give
// whole pages of free records back to the kernel (purge_collect and
// purge_finish, driven by the purger's decay passes); the others keep their
// records for reuse.
//
// Giving pages back: a free list in LIFO order scatters free records over
// every page, so purge_collect first sorts the list by address (a bottom-up
// merge sort of the list itself: no memory needed), keeps the lowest `keep`
// free records listed (hysteresis: a churning pool reuses them and never
// pays a fault) and takes the pages above them whose every record is free
// off the list.  The caller advises them with no lock held (the records
// are in no list, so nothing hands them out meanwhile) and purge_finish
// files them as purged page runs, which later allocations take only once
// the free list and the current chunk are used up, lowest first.  As the
// sorted list hands out low addresses first, the free records gather at the
// top, where the next pass finds whole pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/bits.h"
#include "core/config.h"
#include "core/stats.h"
#include "pal/lock.h"
#include "pal/pal.h"

namespace lazymalloc {

// Pages of free records one purge_collect takes at most (one lock hold, one
// vectored advice), as address ranges.
struct MetaPurge {
  static constexpr unsigned kMaxRanges = 16;
  AdviseRange ranges[kMaxRanges];
  unsigned nranges = 0;
  size_t bytes = 0;
};

// kCountPages: a fresh chunk's pages count in metadata_bytes as records
// are carved on them; false for records whose owner counts the pages it
// touches (heap records: Heap::record_pages).
template <typename T, bool kCountPages = true>
class MetaPool {
  static constexpr size_t kRecord = (sizeof(T) + 63) & ~size_t(63);

 public:
  // Whether whole pages of free records can go back (records tile a page).
  static constexpr bool kPurgeable = kOsPageSize % kRecord == 0;
  static constexpr size_t kPerPage = kPurgeable ? kOsPageSize / kRecord : 0;

  constexpr MetaPool() = default;

  // Zero-filled record, or nullptr when no memory is left.  New chunks come
  // from platform.map.
  T* alloc(const Platform& platform, Stats* stats) {
    LockGuard g(lock_);
    if (free_) {
      Node* n = free_;
      free_ = n->next;
      --free_count_;
      ++live_;
      memset(static_cast<void*>(n), 0, sizeof(T));
      return reinterpret_cast<T*>(n);
    }
    if (size_t(end_ - bump_) < kRecord && !take_purged(stats)) {
      void* chunk = platform.map(platform.ctx, kChunk);
      if (stats) stats->add(Stat::mmap_calls, 1);
      if (!chunk) {
        if (stats) stats->add(Stat::mmap_failures, 1);
        return nullptr;
      }
      if (stats) stats->add(Stat::metadata_mapped_bytes, kChunk);
      bump_ = static_cast<char*>(chunk);
      end_ = bump_ + kChunk;
      written_ = bump_;
      bump_purged_ = false;
    }
    // Fresh mappings read as zero; purged pages are cleared whatever the
    // advice did.
    T* t = reinterpret_cast<T*>(bump_);
    if (bump_purged_) memset(static_cast<void*>(t), 0, sizeof(T));
    bump_ += kRecord;
    // A fresh chunk's pages count as metadata once a record lies on them
    // (purged runs were counted when first carved, and take_purged took
    // them off metadata_purged_bytes).
    if (kCountPages && !bump_purged_ && bump_ > written_) {
      char* to = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(bump_), kOsPageSize));
      if (stats) stats->add(Stat::metadata_bytes, size_t(to - written_));
      written_ = to;
    }
    ++live_;
    return t;
  }

  void free(T* t) {
    LockGuard g(lock_);
    Node* n = reinterpret_cast<Node*>(t);
    n->next = free_;
    free_ = n;
    ++free_count_;
    --live_;
    freed_ = true;
  }

  // Takes the pages whose every record is free, above the lowest `keep`
  // free records, off the free list into *out (at most
  // MetaPurge::kMaxRanges runs of pages, and only while the purged runs
  // have room to file them).  The caller advises them MADV_DONTNEED and
  // calls purge_finish.  Does nothing (out->nranges 0) while at most `keep`
  // plus a page of records are free.
  void purge_collect(size_t keep, MetaPurge* out) {
    out->nranges = 0;
    out->bytes = 0;
    if constexpr (kPurgeable) {
      LockGuard g(lock_);
      // Nothing freed since a look that kept as many: nothing to find.
      if ((!freed_ && keep >= looked_keep_) || free_count_ <= keep + kPerPage ||
          npurged_ + MetaPurge::kMaxRanges > kMaxPurged) {
        return;
      }
      looked_keep_ = keep;
      free_ = sort(free_);
      // Walk page by page; `tail` is where the kept list ends.
      Node** tail = &free_;
      size_t listed = 0;
      bool more = false;  // whole pages left for lack of ranges
      Node* n = free_;
      while (n) {
        uintptr_t page = reinterpret_cast<uintptr_t>(n) & ~(kOsPageSize - 1);
        Node* first = n;
        size_t count = 0;
        while (n && (reinterpret_cast<uintptr_t>(n) & ~(kOsPageSize - 1)) == page) {
          ++count;
          n = n->next;
        }
        bool whole = count == kPerPage && listed >= keep;
        AdviseRange* last = out->nranges ? &out->ranges[out->nranges - 1] : nullptr;
        bool extend = whole && last && reinterpret_cast<uintptr_t>(last->addr) + last->len == page;
        bool take = extend || (whole && out->nranges < MetaPurge::kMaxRanges);
        more = more || (whole && !take);
        if (extend) {
          last->len += kOsPageSize;
        } else if (take) {
          out->ranges[out->nranges++] = {reinterpret_cast<void*>(page), kOsPageSize};
        }
        if (take) {
          out->bytes += kOsPageSize;
          free_count_ -= count;
          continue;
        }
        // Kept: link the page's records after the kept ones.
        *tail = first;
        Node* end = first;
        for (size_t i = 1; i < count; ++i) end = end->next;
        tail = &end->next;
        listed += count;
      }
      *tail = nullptr;
      // Looked at whole: until the next free, another pass finds nothing.
      freed_ = more;
    }
  }

  // The pages of `p` (from purge_collect) after their advice: filed as
  // purged runs (`ok`), or, if the kernel refused, their records listed
  // again.
  void purge_finish(const MetaPurge& p, bool ok, Stats* stats) {
    if constexpr (kPurgeable) {
      if (p.nranges == 0) return;
      LockGuard g(lock_);
      for (unsigned i = 0; i < p.nranges; ++i) {
        if (ok) {
          file_purged(p.ranges[i]);
          continue;
        }
        char* base = static_cast<char*>(p.ranges[i].addr);
        for (size_t off = 0; off < p.ranges[i].len; off += kRecord) {
          Node* n = reinterpret_cast<Node*>(base + off);
          n->next = free_;
          free_ = n;
          ++free_count_;
        }
      }
      if (ok && stats) {
        stats->add(Stat::metadata_purged_bytes, p.bytes);
        stats->add(Stat::metadata_page_purges, p.bytes / kOsPageSize);
      }
    } else {
      (void)p;
      (void)ok;
      (void)stats;
    }
  }

  // Free records listed (tests, and the purger's hysteresis).
  size_t free_records() {
    LockGuard g(lock_);
    return free_count_;
  }
  // Records handed out and not freed.
  size_t live_records() {
    LockGuard g(lock_);
    return live_;
  }
  // Bytes of purged pages not taken again.
  size_t purged_bytes() {
    LockGuard g(lock_);
    size_t b = 0;
    for (unsigned i = 0; i < npurged_; ++i) b += purged_[i].len;
    return b;
  }

  Mutex& lock() { return lock_; }

 private:
  struct Node {
    Node* next;
  };
  static constexpr size_t kChunk = 256 * 1024;
  // Purged runs are kept apart from the pages (which must stay untouched):
  // a live record between two free pages splits a run, so a pool whose live
  // records are scattered needs about one run per live record (redis-server
  // flushed: 45 live spans among 8,500 records).  8 KiB, in .bss and only
  // touched as runs are filed.
  static constexpr unsigned kMaxPurged = kPurgeable ? 512 : 1;

  // REQUIRES lock_: files a purged run, merged with the runs it touches.
  void file_purged(AdviseRange r) {
    for (unsigned i = 0; i < npurged_;) {
      char* a = static_cast<char*>(purged_[i].addr);
      char* b = static_cast<char*>(r.addr);
      if (a + purged_[i].len == b || b + r.len == a) {
        r = {a < b ? a : b, purged_[i].len + r.len};
        purged_[i] = purged_[--npurged_];
        continue;
      }
      ++i;
    }
    purged_[npurged_++] = r;
  }

  // REQUIRES lock_: makes the lowest purged run the carving region.
  bool take_purged(Stats* stats) {
    if (!kPurgeable || npurged_ == 0) return false;
    unsigned low = 0;
    for (unsigned i = 1; i < npurged_; ++i)
      if (purged_[i].addr < purged_[low].addr) low = i;
    AdviseRange r = purged_[low];
    purged_[low] = purged_[--npurged_];
    bump_ = static_cast<char*>(r.addr);
    end_ = bump_ + r.len;
    bump_purged_ = true;
    if (stats) stats->sub(Stat::metadata_purged_bytes, r.len);
    return true;
  }

  // Bottom-up merge sort of a list by address.
  static Node* sort(Node* list) {
    if (!list || !list->next) return list;
    for (size_t width = 1;; width *= 2) {
      Node* rest = list;
      Node* head = nullptr;
      Node** tail = &head;
      unsigned merges = 0;
      while (rest) {
        ++merges;
        Node* a = rest;
        Node* b = a;
        size_t na = 0;
        while (b && na < width) {
          b = b->next;
          ++na;
        }
        size_t nb = width;
        while (na || (nb && b)) {
          Node* take;
          if (!na) {
            take = b;
            b = b->next;
            --nb;
          } else if (!nb || !b || a < b) {
            take = a;
            a = a->next;
            --na;
          } else {
            take = b;
            b = b->next;
            --nb;
          }
          *tail = take;
          tail = &take->next;
        }
        rest = b;
      }
      *tail = nullptr;
      list = head;
      if (merges <= 1) return list;
    }
  }

  Mutex lock_;
  Node* free_ = nullptr;
  size_t free_count_ = 0;
  size_t live_ = 0;
  bool freed_ = false;  // a record was freed since purge_collect last looked
  size_t looked_keep_ = 0;  // the `keep` of that look
  char* bump_ = nullptr;
  char* end_ = nullptr;
  char* written_ = nullptr;  // the fresh chunk's pages below it are counted in metadata_bytes
  bool bump_purged_ = false;  // [bump_, end_) is a purged run, not a fresh chunk
  AdviseRange purged_[kMaxPurged] = {};  // purged page runs, unordered
  unsigned npurged_ = 0;
};

}  // namespace lazymalloc
