// Release of freed huge blocks: off the caller's thread, in parallel, in
// bounded chunks.
//
// munmap or MADV_DONTNEED of a big touched region costs the thread that does
// it ~50 ms per GiB with 4 KiB pages here, and an allocator that does it in
// free() stalls the caller for all of it.  When Backend::release_huge() does
// not keep a freed huge block for reuse, its slots leave circulation and come
// here as a job.  A job is cut into chunks of purge_batch bytes (more when a
// block would need over kMaxChunks chunks); release workers (threads started
// on first need, at most release_workers and the number of CPUs, exiting
// after a second without work) claim chunks one at a time, advise them with
// no lock held (MADV_FREE, or MADV_DONTNEED under limits and pressure, see
// Purger::release_dontneed) and settle each with Backend::purge_finish, after
// which that part of the address range is free again.
//
// Back-pressure: when more than release_backlog bytes are in flight, free()
// releases chunks itself until it is not.  An allocation that finds no free
// address space while releases are in flight helps and waits for them
// (help(true)) instead of reserving and faulting in fresh memory.  With no
// workers (release_workers = 0, or no thread could be started) free() does
// the whole release inline.
//
// fork(): the child has no workers; every chunk not yet settled when the
// process forked (queued, or being advised by a parent's thread) is settled
// in the child as failed, i.e. back to RETAINED free memory, which the
// child's own decay gives back later.  Chunks are settled under lock_, which
// fork_prepare holds, so the child's view of what is settled is exact.
//
// Lock order: Releaser::lock_ before the backend lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "core/accounting.h"
#include "pal/lock.h"
#include "pal/pal.h"

namespace lazymalloc {

class Purger;

class Releaser {
 public:
  static constexpr unsigned kMaxJobs = 32;
  static constexpr unsigned kMaxChunks = 256;

  constexpr Releaser() = default;

  // Workers are started with platform->start_thread; the platform's CPU
  // count (1 if it cannot tell) bounds their number.
  void init(Backend* backend, Purger* purger, const Platform* platform, Stats* stats);

  // Takes over a run from Backend::release_huge.  Returns once the run is
  // queued, unless the backlog is over release_backlog or no worker can run
  // (then the caller releases chunks itself).  `now` is when it was freed.
  void submit(const SlotRun& run, bool dontneed, uint64_t now);
  // Releases queued chunks on the calling thread; with `wait`, then waits
  // until every release in flight has been settled.
  void help(bool wait);
  // Claims and releases one queued chunk; false if none was queued.
  // (`helper`: counted as released by a non-worker thread.)
  bool run_one(bool helper);
  uint64_t inflight_bytes() const { return acct_.inflight_bytes.get(); }
  // What the purger's decisions read (Purger::watch_releases).
  const ReleaseAccounting& accounting() const { return acct_; }
  // Worker threads still running (including ones on their way out).
  unsigned workers() const;

  void fork_prepare() { lock_.lock(); }
  void fork_parent() { lock_.unlock(); }
  void fork_child();

 private:
  struct Job {
    SlotMeta* first;
    size_t nslots;
    size_t chunk_slots;
    unsigned nchunks;
    unsigned claimed;  // chunks handed out, in order
    unsigned settled;  // chunks settled
    uint64_t settled_mask[kMaxChunks / 64];
    uint64_t start_ns;
    bool dontneed;
    bool live;
  };

  // Takes a free job record for the run; false if all are in use.
  bool queue(const SlotRun& run, size_t chunk_slots, bool dontneed, uint64_t now);
  // REQUIRES lock_.
  bool claim(Job** job, unsigned* chunk);
  static bool unclaimed(const Job& j) { return j.live && j.claimed < j.nchunks; }
  // The purge batch of chunk `chunk` of `j` (Backend::run_batch).
  static void chunk_batch(const Job& j, unsigned chunk, size_t max_range, PurgeBatch* batch);
  void ensure_workers();
  static void* worker_main(void* self);

  Backend* backend_ = nullptr;
  Purger* purger_ = nullptr;
  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;  // reporting only: decisions read acct_
  ReleaseAccounting acct_;
  unsigned cpus_ = 0;  // set by init()

  Mutex lock_;
  Job jobs_[kMaxJobs] = {};
  std::atomic<uint32_t> workers_{0};  // changed under lock_: workers that take chunks
  // Workers that left workers_ and are returning; the decrement (release) is
  // an exiting worker's last touch of this object.
  std::atomic<uint32_t> exiting_{0};
  std::atomic<uint32_t> work_seq_{0};      // bumped when chunks are queued
  std::atomic<uint32_t> settle_seq_{0};    // bumped when a chunk is settled
  std::atomic<uint32_t> settle_waiters_{0};
};

}  // namespace lazymalloc
