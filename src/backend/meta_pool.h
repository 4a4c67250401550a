// Fixed-size records (spans, heaps) carved from mapped chunks, with a free
// list.  Never returns memory to the kernel: records are small and reused.
#pragma once

#include <cstddef>
#include <cstring>

#include "core/stats.h"
#include "pal/lock.h"
#include "pal/pal.h"

namespace lazymalloc {

template <typename T>
class MetaPool {
 public:
  constexpr MetaPool() = default;

  // Zero-filled record, or nullptr when no memory is left.  New chunks come
  // from platform.map.
  T* alloc(const Platform& platform, Stats* stats) {
    LockGuard g(lock_);
    if (free_) {
      Node* n = free_;
      free_ = n->next;
      memset(static_cast<void*>(n), 0, sizeof(T));
      return reinterpret_cast<T*>(n);
    }
    if (size_t(end_ - bump_) < kRecord) {
      void* chunk = platform.map(platform.ctx, kChunk);
      if (stats) stats->add(Stat::mmap_calls, 1);
      if (!chunk) {
        if (stats) stats->add(Stat::mmap_failures, 1);
        return nullptr;
      }
      if (stats) stats->add(Stat::metadata_bytes, kChunk);
      bump_ = static_cast<char*>(chunk);
      end_ = bump_ + kChunk;
    }
    T* t = reinterpret_cast<T*>(bump_);
    bump_ += kRecord;
    return t;
  }

  void free(T* t) {
    LockGuard g(lock_);
    Node* n = reinterpret_cast<Node*>(t);
    n->next = free_;
    free_ = n;
  }

  Mutex& lock() { return lock_; }

 private:
  struct Node {
    Node* next;
  };
  static constexpr size_t kRecord = (sizeof(T) + 63) & ~size_t(63);
  static constexpr size_t kChunk = 256 * 1024;

  Mutex lock_;
  Node* free_ = nullptr;
  char* bump_ = nullptr;
  char* end_ = nullptr;
};

}  // namespace lazymalloc
