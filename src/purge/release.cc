#include "purge/release.h"

#include "core/options.h"
#include "purge/purger.h"

namespace lazymalloc {

namespace {
constexpr int64_t kWorkerIdleNs = 1000000000;  // a worker exits after 1 s without work
constexpr int64_t kWaitSliceNs = 10000000;     // help(true) rechecks every 10 ms
}  // namespace

void Releaser::init(Backend* backend, Purger* purger, const Platform* platform, Stats* stats) {
  backend_ = backend;
  purger_ = purger;
  platform_ = platform;
  stats_ = stats;
  unsigned cpus = platform->cpu_count(platform->ctx);
  cpus_ = cpus ? cpus : 1;
  purger->watch_releases(&acct_);
}

unsigned Releaser::workers() const {
  return workers_.load(std::memory_order_acquire) + exiting_.load(std::memory_order_acquire);
}

void Releaser::chunk_batch(const Job& j, unsigned c, size_t max_range, PurgeBatch* batch) {
  size_t first = size_t(c) * j.chunk_slots;
  size_t left = j.nslots - first;
  Backend::run_batch(j.first + first, left < j.chunk_slots ? left : j.chunk_slots, max_range, batch);
}

bool Releaser::claim(Job** job, unsigned* chunk) {
  for (Job& j : jobs_) {
    if (unclaimed(j)) {
      *job = &j;
      *chunk = j.claimed++;
      return true;
    }
  }
  return false;
}

bool Releaser::queue(const SlotRun& run, size_t chunk_slots, bool dontneed, uint64_t now) {
  LockGuard g(lock_);
  for (Job& j : jobs_) {
    if (j.live) continue;
    j = Job{};
    j.first = run.first;
    j.nslots = run.nslots;
    j.chunk_slots = chunk_slots;
    j.nchunks = unsigned((run.nslots + chunk_slots - 1) / chunk_slots);
    j.start_ns = now;
    j.dontneed = dontneed;
    j.live = true;
    return true;
  }
  return false;
}

void Releaser::submit(const SlotRun& run, bool dontneed, uint64_t now) {
  size_t chunk_slots = size_t(option(Opt::purge_batch)) / kSlotSize;
  size_t min_chunk = (run.nslots + kMaxChunks - 1) / kMaxChunks;
  if (chunk_slots < min_chunk) chunk_slots = min_chunk;
  if (chunk_slots == 0) chunk_slots = 1;
  stats_->add(Stat::huge_released, 1);
  stats_->add(Stat::release_inflight_bytes, uint64_t(run.nslots) * kSlotSize);
  acct_.inflight_bytes.add(uint64_t(run.nslots) * kSlotSize);
  // Every job record taken: release someone's chunk (or wait for one) first.
  while (!queue(run, chunk_slots, dontneed, now)) {
    if (!run_one(true)) help(true);
  }
  work_seq_.fetch_add(1, std::memory_order_release);
  ensure_workers();
  if (workers_.load(std::memory_order_acquire) == 0) {
    help(false);  // nobody else will
    return;
  }
  platform_->wake(platform_->ctx, &work_seq_);  // at most cpus_ workers wait there
  uint64_t backlog = uint64_t(option(Opt::release_backlog));
  while (inflight_bytes() > backlog && run_one(true)) {
  }
}

void Releaser::ensure_workers() {
  unsigned want = unsigned(option(Opt::release_workers));
  if (want > cpus_) want = cpus_;
  for (;;) {
    {
      LockGuard g(lock_);
      if (workers_.load(std::memory_order_relaxed) >= want) return;
      workers_.fetch_add(1, std::memory_order_relaxed);
      stats_->add(Stat::release_threads, 1);
      acct_.threads.add(1);
    }
    if (!platform_->start_thread(platform_->ctx, &Releaser::worker_main, this)) {
      LockGuard g(lock_);
      workers_.fetch_sub(1, std::memory_order_relaxed);
      stats_->sub(Stat::release_threads, 1);
      acct_.threads.sub(1);
      stats_->add(Stat::release_thread_failures, 1);
      return;
    }
  }
}

bool Releaser::run_one(bool helper) {
  Job* j;
  unsigned c;
  PurgeBatch batch;
  bool dontneed;
  {
    LockGuard g(lock_);
    if (!claim(&j, &c)) return false;
    dontneed = j->dontneed;
    chunk_batch(*j, c, size_t(option(Opt::purge_batch)), &batch);
  }
  bool clean = false;
  uint64_t busy = 0;
  int rc = purger_->adviser().advise(batch.ranges, batch.nranges, batch.bytes, dontneed, &clean, &busy);
  uint64_t bytes = batch.bytes;
  {
    LockGuard g(lock_);
    backend_->purge_finish(&batch, clean, rc != 0);
    j->settled_mask[c / 64] |= uint64_t(1) << (c % 64);
    if (++j->settled == j->nchunks) {
      j->live = false;
      uint64_t now = platform_->now_ns(platform_->ctx);
      stats_->add(Stat::release_ns, now > j->start_ns ? now - j->start_ns : 0);
    }
    // Counted before the chunk leaves the in-flight bytes: whoever sees
    // those reach 0 (help(true), tests) sees every count.
    stats_->add(Stat::release_chunks, 1);
    if (helper) stats_->add(Stat::release_helped_chunks, 1);
    if (rc == 0) stats_->add(Stat::release_bytes, bytes);
    stats_->add(Stat::release_busy_ns, busy);
    stats_->sub(Stat::release_inflight_bytes, bytes);
    acct_.inflight_bytes.sub(bytes);
  }
  settle_seq_.fetch_add(1, std::memory_order_release);
  if (settle_waiters_.load(std::memory_order_acquire)) platform_->wake(platform_->ctx, &settle_seq_);
  return true;
}

void Releaser::help(bool wait) {
  for (;;) {
    while (run_one(true)) {
    }
    if (!wait) return;
    uint32_t seq = settle_seq_.load(std::memory_order_acquire);
    if (inflight_bytes() == 0) return;
    // Chunks claimed by workers are still being advised: wait for them.
    settle_waiters_.fetch_add(1, std::memory_order_acq_rel);
    if (inflight_bytes() != 0) platform_->wait(platform_->ctx, &settle_seq_, seq, kWaitSliceNs);
    settle_waiters_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void* Releaser::worker_main(void* arg) {
  auto* self = static_cast<Releaser*>(arg);
  Stats* stats = self->stats_;
  const Platform* p = self->platform_;
  p->background_priority(p->ctx);
  for (;;) {
    uint32_t seq = self->work_seq_.load(std::memory_order_acquire);
    if (self->run_one(false)) continue;
    p->wait(p->ctx, &self->work_seq_, seq, kWorkerIdleNs);
    if (self->work_seq_.load(std::memory_order_acquire) != seq) continue;
    // A second without new work: exit unless some arrived meanwhile (ensure_workers
    // starts another worker after queueing, so no job is left without one).
    bool pending = false;
    {
      LockGuard g(self->lock_);
      for (const Job& j : self->jobs_) pending = pending || unclaimed(j);
      if (!pending) {
        self->workers_.fetch_sub(1, std::memory_order_relaxed);
        self->exiting_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (pending) continue;
    stats->sub(Stat::release_threads, 1);
    self->acct_.threads.sub(1);
    // The last touch of the releaser: a test may destroy it once workers()
    // reads 0.
    self->exiting_.fetch_sub(1, std::memory_order_release);
    return nullptr;
  }
}

void Releaser::fork_child() {
  lock_.reset();
  workers_.store(0, std::memory_order_relaxed);
  exiting_.store(0, std::memory_order_relaxed);
  stats_->set(Stat::release_threads, 0);
  acct_.threads.set(0);
  // No thread of the parent exists here: what they had not settled goes back
  // to the free lists as RETAINED (a failed purge), for this process's decay.
  for (Job& j : jobs_) {
    if (!j.live) continue;
    for (unsigned c = 0; c < j.nchunks; ++c) {
      if (j.settled_mask[c / 64] >> (c % 64) & 1) continue;
      PurgeBatch batch;
      chunk_batch(j, c, kSlotSize, &batch);
      backend_->purge_finish(&batch, false, true);
    }
    j.live = false;
  }
  stats_->set(Stat::release_inflight_bytes, 0);
  acct_.inflight_bytes.set(0);
  work_seq_.store(0, std::memory_order_relaxed);
  settle_seq_.store(0, std::memory_order_relaxed);
  settle_waiters_.store(0, std::memory_order_relaxed);
}

}  // namespace lazymalloc
