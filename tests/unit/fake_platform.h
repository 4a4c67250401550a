// A fake platform for deterministic tests of policy code: a manual clock,
// real (but recorded) reservations and metadata mappings, recorded advice,
// canned /proc and cgroup files, and a fault knob for every operation
// (fail the Nth call from now, or every call).
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pal/pal.h"

namespace lazymalloc::test {

struct AdviceCall {
  uintptr_t addr;
  size_t len;
  Advice advice;
};

// When one operation of the fake platform fails.
struct Fault {
  int err = ENOMEM;        // errno value a failing call reports (where it reports one)
  uint64_t fail_at = 0;    // the call with this number fails (see fail_nth); 0: none
  bool fail_all = false;   // every call fails
  size_t only_size = 0;    // if set, only calls of this size are counted and may fail
  uint64_t calls = 0;      // calls counted so far
  uint64_t failures = 0;   // calls made to fail so far

  void fail_nth(uint64_t n, int e = ENOMEM) {  // n = 1: the next call
    fail_at = calls + n;
    err = e;
  }
  void fail_every(int e = ENOMEM) {
    fail_all = true;
    err = e;
  }
  void heal() {
    fail_at = 0;
    fail_all = false;
  }
  bool hit(size_t size = 0) {
    if (only_size && size != only_size) return false;
    ++calls;
    bool fail = fail_all || calls == fail_at;
    failures += fail;
    return fail;
  }
};

class FakePlatform {
 public:
  FakePlatform() {
    platform_ = {
        .ctx = this,
        .reserve = &reserve,
        .advise = &advise,
        .now_ns = &now,
        .read_file = &read_file,
        .wait = &wait,
        .wake = &wake,
        .thread_cpu_ns = &thread_cpu,
        .advise_vector = &advise_vector,
        .map = &map,
        .unmap = &unmap,
        .advise_hugepage = &hugepage,
        .start_thread = &start_thread,
        .process_barrier = &process_barrier,
        .wake_one = &wake_one,
        .protect = &protect,
        .move_pages = &move_pages,
        .random = &random,
        .cpu_count = &cpu_count,
        .background_priority = &background_priority,
        .write = &write,
        .dup_fd = &dup_fd,
        .open_append = &open_append,
        .close_fd = &close_fd,
        .process_id = &process_id,
        .wall_clock_ms = &wall_clock_ms,
        .map_shared_fd = &map_shared_fd,
        .resident_pages = &resident_pages,
        .host_reports_free_pages = &host_reports_free_pages,
    };
  }
  const Platform* get() const { return &platform_; }

  uint64_t now_ns = 1'000'000'000;  // starts at 1 s
  void advance_ms(uint64_t ms) { now_ns += ms * 1'000'000; }

  // ---- fault knobs ----
  Fault reserve_fault;  // arena reservations
  Fault map_fault;      // metadata mappings (page map leaves, slot/span/arena/heap records), the timeline page
  Fault advise_fault;   // madvise of one range (any advice)
  Fault vector_fault;   // process_madvise (set err = ENOSYS for "unsupported")
  Fault read_fault;     // file reads (fail: the file is missing)
  Fault thread_fault;   // thread creation
  Fault barrier_fault;  // membarrier (registration or barrier): the real one unless it fails
  Fault protect_fault;  // mprotect (guard pages): the real one unless it fails
  Fault move_fault;     // mremap (huge realloc): the real one unless it fails
  Fault random_fault;   // getrandom: a failing call returns 0 (no entropy)
  Fault cpu_fault;      // CPU count: a failing call returns 0 (unknown)
  Fault dup_fault;      // dup of a descriptor: a failing call returns the fd itself
  Fault open_fault;     // opening a statistics file: a failing call returns -EACCES
  uint64_t wall_ms = 1'700'000'000'000;  // the wall clock a report names
  Fault write_fault;    // write to a descriptor: a failing call writes nothing
  unsigned cpus = 4;    // what cpu_count() reports
  uint64_t random_value = 0x9e3779b97f4a7c15;  // what random() returns (then steps)
  size_t vector_short_by = 0;  // process_madvise reports this many bytes fewer (partial)
  int fail_free_with = 0;      // errno to return for MADV_FREE (0 = succeed)
  int fail_dontneed_with = 0;  // errno to return for MADV_DONTNEED
  bool fail_reserve = false;
  void* reserve_at = nullptr;  // next reservation at this address (MAP_FIXED_NOREPLACE)

  // ---- records ----
  std::vector<AdviceCall> calls;
  size_t reserves = 0;
  size_t advise_calls = 0;   // platform advice calls (vector or range)
  size_t vector_calls = 0;   // of which process_madvise
  size_t hugepage_calls = 0;
  struct HugepageCall {
    void* addr;
    size_t len;
    bool huge;  // MADV_HUGEPAGE (else MADV_NOHUGEPAGE)
  };
  std::vector<HugepageCall> hugepage_advice;
  size_t threads_started = 0;
  size_t mapped_bytes = 0;     // metadata bytes mapped (unmaps are listed below)
  size_t reserved_bytes = 0;   // bytes reserved
  std::vector<std::pair<void*, size_t>> reservations;
  std::vector<std::pair<void*, size_t>> unmaps;
  bool was_unmapped(void* addr, size_t size) const {
    for (const auto& u : unmaps) {
      if (u.first == addr && u.second == size) return true;
    }
    return false;
  }
  std::map<std::string, std::string> files;  // canned /proc and cgroup files
  std::map<std::string, int> file_reads;     // reads per path (missing files too)
  int64_t slept_ns = 0;
  // Platform::wait: every timeout asked for (-1: none).  A wait whose word
  // still holds `expected` advances the clock by its timeout (a wait with
  // none returns at once, as if woken); `on_wait` runs first (a test does
  // what another thread would do meanwhile).
  std::vector<int64_t> waits;
  size_t waits_woken = 0;  // waits that found the word changed (woken)
  size_t wakes = 0;        // Platform::wake calls
  size_t wake_ones = 0;    // Platform::wake_one calls
  size_t protects = 0;     // Platform::protect calls that succeeded
  size_t moves = 0;        // Platform::move_pages calls that succeeded
  size_t randoms = 0;      // Platform::random calls
  size_t background_priorities = 0;  // Platform::background_priority calls
  std::string written;     // what Platform::write wrote (it writes for real too)
  // Held while wait, wake, wake_one and background_priority record (they
  // may run on other threads); a test reading those records while such a
  // thread may still run takes it too.
  std::mutex& records_lock() { return wait_lock_; }
  std::function<void()> on_wait;
  uint64_t cpu_ns = 0;     // Platform::thread_cpu_ns
  // Platform::resident_pages: the real mincore unless `resident_answer` is
  // set (>= 0: that many pages, -1: the kernel refused); every call recorded.
  long resident_answer = -2;
  std::vector<std::pair<void*, size_t>> resident_queries;
  // Platform::host_reports_free_pages: the answer, and how many times asked.
  bool reports_free_pages = false;
  unsigned reporting_queries = 0;
  size_t advised_bytes(Advice a) const {
    size_t n = 0;
    for (const auto& c : calls) n += c.advice == a ? c.len : 0;
    return n;
  }

 private:
  static FakePlatform* self(void* ctx) { return static_cast<FakePlatform*>(ctx); }
  static bool process_barrier(void* ctx, bool setup) {
    if (self(ctx)->barrier_fault.hit()) return false;
    return real().process_barrier(nullptr, setup);
  }
  static void* reserve(void* ctx, size_t size, size_t align) {
    FakePlatform* f = self(ctx);
    if (f->fail_reserve || f->reserve_fault.hit(size)) return nullptr;
    void* p;
    if (f->reserve_at) {
      p = mmap(f->reserve_at, size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
      f->reserve_at = nullptr;
      if (p == MAP_FAILED) return nullptr;
    } else {
      p = real().reserve(nullptr, size, align);
      if (!p) return nullptr;
    }
    f->reserves++;
    f->reserved_bytes += size;
    f->reservations.emplace_back(p, size);
    return p;
  }
  static void* map(void* ctx, size_t size) {
    FakePlatform* f = self(ctx);
    if (f->map_fault.hit(size)) return nullptr;
    void* p = real().map(nullptr, size);
    if (p) f->mapped_bytes += size;
    return p;
  }
  static void unmap(void* ctx, void* addr, size_t size) {
    FakePlatform* f = self(ctx);
    f->unmaps.emplace_back(addr, size);
    real().unmap(nullptr, addr, size);
  }
  int advice_error(Advice a) {
    int rc = a == Advice::kFree ? fail_free_with : fail_dontneed_with;
    if (!rc && advise_fault.hit()) rc = advise_fault.err;
    return rc;
  }
  static int advise(void* ctx, void* addr, size_t len, Advice a) {
    FakePlatform* f = self(ctx);
    std::lock_guard<std::mutex> guard(f->advise_lock_);  // release workers advise in parallel
    f->advise_calls++;
    if (int rc = f->advice_error(a)) return rc;
    f->calls.push_back({reinterpret_cast<uintptr_t>(addr), len, a});
    return 0;
  }
  static long advise_vector(void* ctx, const AdviseRange* r, unsigned n, Advice a) {
    FakePlatform* f = self(ctx);
    std::lock_guard<std::mutex> guard(f->advise_lock_);
    f->advise_calls++;
    f->vector_calls++;
    if (f->vector_fault.hit()) return -f->vector_fault.err;
    if (int rc = f->advice_error(a)) return -rc;
    size_t bytes = 0;
    for (unsigned i = 0; i < n; ++i) {
      f->calls.push_back({reinterpret_cast<uintptr_t>(r[i].addr), r[i].len, a});
      bytes += r[i].len;
    }
    return long(bytes - (f->vector_short_by < bytes ? f->vector_short_by : bytes));
  }
  static void hugepage(void* ctx, void* addr, size_t len, bool huge) {
    self(ctx)->hugepage_calls++;
    self(ctx)->hugepage_advice.push_back({addr, len, huge});
  }
  static bool start_thread(void* ctx, void* (*)(void*), void*) {
    // Never runs the thread: a test drives the purger's ticks itself.
    FakePlatform* f = self(ctx);
    if (f->thread_fault.hit()) return false;
    f->threads_started++;
    return true;
  }
  static long read_file(void* ctx, const char* path, char* buf, size_t len) {
    FakePlatform* f = self(ctx);
    f->file_reads[path]++;
    if (f->read_fault.hit()) return -1;
    auto it = f->files.find(path);
    if (it == f->files.end() || len == 0) return -1;
    size_t n = it->second.size() < len - 1 ? it->second.size() : len - 1;
    it->second.copy(buf, n);
    buf[n] = '\0';
    return long(n);
  }
  static void wait(void* ctx, std::atomic<uint32_t>* word, uint32_t expected, int64_t ns) {
    FakePlatform* f = self(ctx);
    {
      std::lock_guard<std::mutex> guard(f->wait_lock_);  // a Mutex or a waiter on another thread
      f->waits.push_back(ns < 0 ? -1 : ns);
    }
    if (f->on_wait) f->on_wait();  // (may wake: not under the lock)
    if (word->load() != expected) {
      std::lock_guard<std::mutex> guard(f->wait_lock_);
      f->waits_woken++;
      return;
    }
    if (ns < 0) return;
    f->slept_ns += ns;
    f->now_ns += uint64_t(ns);
  }
  static void wake(void* ctx, std::atomic<uint32_t>*) {
    std::lock_guard<std::mutex> guard(self(ctx)->wait_lock_);
    self(ctx)->wakes++;
  }
  static void wake_one(void* ctx, std::atomic<uint32_t>*) {
    std::lock_guard<std::mutex> guard(self(ctx)->wait_lock_);
    self(ctx)->wake_ones++;
  }
  static const Platform& real() { return pal::linux_platform(); }
  static bool protect(void* ctx, void* addr, size_t size, bool accessible) {
    FakePlatform* f = self(ctx);
    if (f->protect_fault.hit()) return false;
    if (!real().protect(nullptr, addr, size, accessible)) return false;
    f->protects++;
    return true;
  }
  static bool move_pages(void* ctx, void* from, size_t len, void* to, bool huge) {
    FakePlatform* f = self(ctx);
    if (f->move_fault.hit()) return false;
    if (!real().move_pages(nullptr, from, len, to, huge)) return false;
    f->moves++;
    return true;
  }
  static uint64_t random(void* ctx) {
    FakePlatform* f = self(ctx);
    f->randoms++;
    if (f->random_fault.hit()) return 0;
    uint64_t v = f->random_value;
    f->random_value = v * 6364136223846793005u + 1442695040888963407u;
    return v;
  }
  static unsigned cpu_count(void* ctx) { return self(ctx)->cpu_fault.hit() ? 0 : self(ctx)->cpus; }
  static void background_priority(void* ctx) {
    std::lock_guard<std::mutex> guard(self(ctx)->wait_lock_);  // from worker threads
    self(ctx)->background_priorities++;
  }
  static void write(void* ctx, int fd, const char* buf, size_t len) {
    FakePlatform* f = self(ctx);
    if (f->write_fault.hit()) return;
    f->written.append(buf, len);
    real().write(nullptr, fd, buf, len);
  }
  static int dup_fd(void* ctx, int fd) {
    return self(ctx)->dup_fault.hit() ? fd : real().dup_fd(nullptr, fd);
  }
  static int open_append(void* ctx, const char* path) {
    return self(ctx)->open_fault.hit() ? -EACCES : real().open_append(nullptr, path);
  }
  static void close_fd(void*, int fd) { real().close_fd(nullptr, fd); }
  static int process_id(void*) { return real().process_id(nullptr); }
  static void* map_shared_fd(void* ctx, int fd, size_t size) {
    return self(ctx)->map_fault.hit() ? nullptr : real().map_shared_fd(nullptr, fd, size);
  }
  static uint64_t wall_clock_ms(void* ctx) { return self(ctx)->wall_ms; }
  static long resident_pages(void* ctx, void* addr, size_t len) {
    FakePlatform* f = self(ctx);
    f->resident_queries.emplace_back(addr, len);
    return f->resident_answer >= -1 ? f->resident_answer : real().resident_pages(nullptr, addr, len);
  }
  static bool host_reports_free_pages(void* ctx) {
    FakePlatform* f = self(ctx);
    ++f->reporting_queries;
    return f->reports_free_pages;
  }
  static uint64_t thread_cpu(void* ctx) { return self(ctx)->cpu_ns; }
  static uint64_t now(void* ctx) { return self(ctx)->now_ns; }

  Platform platform_;
  std::mutex advise_lock_;
  std::mutex wait_lock_;
};

}  // namespace lazymalloc::test
