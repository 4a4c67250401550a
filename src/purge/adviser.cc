#include "purge/adviser.h"

#include <errno.h>

namespace lazymalloc {

int Adviser::advise_ranges(const AdviseRange* ranges, unsigned n, Advice advice, unsigned* calls) {
  unsigned made = 0;
  if (n > 1 && !vector_unsupported()) {
    long r = platform_->advise_vector(platform_->ctx, ranges, n, advice);
    ++made;
    size_t want = 0;
    for (unsigned i = 0; i < n; ++i) want += ranges[i].len;
    if (r >= 0 && size_t(r) == want) {
      *calls = made;
      return 0;
    }
    // No such call (ENOSYS), advice not accepted there (EINVAL), not
    // allowed (EPERM), no pidfd (EBADF): madvise from now on.  Any other
    // failure, or a partial result, is finished range by range this time.
    if (r == -ENOSYS || r == -EINVAL || r == -EPERM || r == -EBADF) {
      vector_refused_.store(true, std::memory_order_relaxed);
      stats_->set(Stat::purge_vector_unsupported, 1);
    }
  }
  int rc = 0;
  for (unsigned i = 0; i < n; ++i) {
    ++made;
    int e = platform_->advise(platform_->ctx, ranges[i].addr, ranges[i].len, advice);
    if (e) {
      rc = e;
      if (e == EINVAL && advice == Advice::kFree) break;  // the caller retries with DONTNEED
    }
  }
  *calls = made;
  return rc;
}

int Adviser::advise(const AdviseRange* ranges, unsigned n, size_t bytes, bool dontneed, bool* clean_out,
                    uint64_t* ns) {
  bool clean = dontneed || free_unsupported();
  uint64_t t0 = platform_->now_ns(platform_->ctx);
  unsigned calls = 0;
  int rc = advise_ranges(ranges, n, clean ? Advice::kDontNeed : Advice::kFree, &calls);
  if (rc == EINVAL && !clean) {
    // Kernels before 4.5 (and some emulators) do not know MADV_FREE: use
    // MADV_DONTNEED for good, on all the ranges again (ranges already given
    // MADV_FREE must read as zero once settled CLEAN).
    free_unsupported_.store(true, std::memory_order_relaxed);
    stats_->set(Stat::purge_free_unsupported, 1);
    clean = true;
    unsigned more = 0;
    rc = advise_ranges(ranges, n, Advice::kDontNeed, &more);
    calls += more;
  }
  uint64_t took = platform_->now_ns(platform_->ctx) - t0;
  stats_->add(Stat::purge_ns, took);
  if (ns) *ns = took;
  stats_->add(clean ? Stat::purge_dontneed_calls : Stat::purge_lazy_calls, calls);
  if (rc != 0) {
    // The caller settles the ranges as still RETAINED: conservative, since
    // RETAINED memory is never assumed to be zero.  Retried on a later pass.
    stats_->add(Stat::purge_failures, 1);
  } else {
    stats_->add(clean ? Stat::purge_dontneed_bytes : Stat::purge_lazy_bytes, bytes);
  }
  *clean_out = clean;
  return rc;
}

}  // namespace lazymalloc
