// The platform abstraction layer: the only code in lazymalloc that makes
// system calls.  Everything above it reaches the kernel through a
// `Platform` (below), so that any effect can be faked, recorded and made to
// fail in tests (tests/unit/fake_platform.h); the few pal:: functions
// declared after it are process plumbing (errno, the environment, dynamic
// symbols, thread-exit and fork hooks, the fatal exit), not effects a test
// needs to fail.  tests/lint/no_syscalls.sh holds the rule.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lazymalloc {

// Advice given to the kernel about a free range.
enum class Advice : uint8_t {
  kFree,      // MADV_FREE: lazily freed; a write cancels it; may read as old data or zeros
  kDontNeed,  // MADV_DONTNEED: dropped now; reads as zeros
};

struct AdviseRange {
  void* addr;
  size_t len;
};

// What the allocator needs from the operating system: every effect the
// backend, the purger and the frontend depend on goes through one of these.
// The real one is pal::linux_platform(); tests pass a fake with a manual
// clock that records every call, serves canned /proc and cgroup files and
// can be told to fail any of them (tests/unit/fake_platform.h).
struct Platform {
  void* ctx;
  // Reserve `size` bytes aligned to `align` (a power of two >= 4 KiB),
  // readable and writable, not committed.  nullptr on failure.
  void* (*reserve)(void* ctx, size_t size, size_t align);
  // madvise(2) of one range: 0 or the errno value (EINVAL for an advice the
  // kernel does not know).  The purger makes the vector/range decisions.
  int (*advise)(void* ctx, void* addr, size_t len, Advice advice);
  // Monotonic clock in nanoseconds.
  uint64_t (*now_ns)(void* ctx);
  // Whole small file (procfs, cgroupfs) into buf, NUL-terminated; returns
  // its length or -1.
  long (*read_file)(void* ctx, const char* path, char* buf, size_t len);
  // Waits while *word == expected, at most timeout_ns (< 0: no limit), or
  // until wake() on the same word: futex(2) FUTEX_WAIT (spurious returns
  // allowed).  The background thread sleeps to its next deadline with it.
  void (*wait)(void* ctx, std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);
  // Wakes every waiter on `word` (FUTEX_WAKE).
  void (*wake)(void* ctx, std::atomic<uint32_t>* word);
  // CPU time the calling thread has used, in nanoseconds
  // (CLOCK_THREAD_CPUTIME_ID).
  uint64_t (*thread_cpu_ns)(void* ctx);
  // One process_madvise(2) call on our own process for n <= 64 ranges:
  // the bytes advised (less than asked: partial), or -errno (-ENOSYS: no
  // such call, -EINVAL: advice not accepted there, ...).
  long (*advise_vector)(void* ctx, const AdviseRange* ranges, unsigned n, Advice advice);
  // Metadata memory (page map leaves, slot, span, arena and heap records):
  // `size` bytes, page-aligned, zero-filled.  nullptr on failure.
  void* (*map)(void* ctx, size_t size);
  // Gives back a reservation or a metadata mapping (failure paths), or
  // the buffer of a statistics report.
  void (*unmap)(void* ctx, void* addr, size_t size);
  // MADV_HUGEPAGE / MADV_NOHUGEPAGE on a range; failures are ignored.
  void (*advise_hugepage)(void* ctx, void* addr, size_t size, bool huge);
  // Starts a detached thread with all signals blocked; false on failure.
  bool (*start_thread)(void* ctx, void* (*fn)(void*), void* arg);
  // The heavy side of an asymmetric fence (membarrier(2),
  // MEMBARRIER_CMD_PRIVATE_EXPEDITED): when it returns, every thread of the
  // process has executed a full memory barrier, so the other side needs only
  // a compiler barrier.  With `setup`, registers the process for it (once,
  // at start-up).  false: not available (the light side must then fence).
  bool (*process_barrier)(void* ctx, bool setup);
  // Wakes one waiter on `word` (FUTEX_WAKE 1): a lock's hand-over.
  void (*wake_one)(void* ctx, std::atomic<uint32_t>* word);
  // mprotect: PROT_READ|PROT_WRITE, or PROT_NONE (guard pages).  false on
  // failure.
  bool (*protect)(void* ctx, void* addr, size_t size, bool accessible);
  // Moves the pages of [from, from + len) to [to, to + len) (both page
  // aligned, inside our own mappings) without copying: mremap(2).
  // Afterwards `from` is mapped and reads as zero, and `to` holds the old
  // contents.  false (both ranges still mapped, contents of `to` undefined)
  // if the kernel refused.  `huge`: re-advise remapped ranges MADV_HUGEPAGE.
  bool (*move_pages)(void* ctx, void* from, size_t len, void* to, bool huge);
  // 64 random bits (getrandom; the clock and ASLR if it is unavailable).
  uint64_t (*random)(void* ctx);
  // The CPUs this process may run on (sched_getaffinity, else those
  // online); 0 if unknown.
  unsigned (*cpu_count)(void* ctx);
  // Makes the calling thread a batch thread (SCHED_BATCH): for workers that
  // must not preempt the application threads that wake them.
  void (*background_priority)(void* ctx);
  // Writes the whole buffer to a file descriptor, ignoring errors.
  void (*write)(void* ctx, int fd, const char* buf, size_t len);
  // A close-on-exec duplicate of `fd` numbered 100 or above (fd itself on
  // failure).
  int (*dup_fd)(void* ctx, int fd);
  // Opens `path` for appending (created with mode 0644, close-on-exec): a
  // descriptor, or -errno.  errno is preserved.
  int (*open_append)(void* ctx, const char* path);
  void (*close_fd)(void* ctx, int fd);
  // The process id (getpid), and the wall clock (CLOCK_REALTIME) in
  // milliseconds since 1970-01-01 UTC: what a statistics report names.
  int (*process_id)(void* ctx);
  uint64_t (*wall_clock_ms)(void* ctx);
  // A shared read-write mapping of the first `size` bytes of the file open
  // as `fd` (the timeline page, core/timeline.h); nullptr on failure (errno
  // preserved).
  void* (*map_shared_fd)(void* ctx, int fd, size_t size);
  // How many of the pages of [addr, addr + len) (page aligned, inside our
  // own mappings) are resident now: mincore(2).  -1 if the kernel refused.
  // The frontend asks before it gives back a sparse span (spans.cc).
  long (*resident_pages)(void* ctx, void* addr, size_t len);
  // Whether this machine is a guest that reports its free memory to its
  // host (a virtio-balloon device with free page reporting): there the host
  // drops the backing of free 2 MiB blocks, so a hugepage fault on fresh
  // memory also faults 2 MiB in on the host.  Asked once, when hugepage
  // advice is first decided (Backend, `hugepages=auto`).
  bool (*host_reports_free_pages)(void* ctx);
};

namespace pal {

// The real platform.
const Platform& linux_platform();
// The platform of the process-wide futex locks (Mutex, lock.h), which have
// no owner to hand them one: linux_platform() unless a test installs
// another (nullptr: back to Linux).
const Platform& lock_platform();
void set_lock_platform(const Platform* platform);

// ---- process plumbing (no Platform entry: nothing a test needs to fail) ----

// Writes the message to stderr and aborts the process (SIGABRT): usable in
// any state, before start-up and after corruption.
[[noreturn]] void fatal(const char* msg, size_t len);
// errno access without <cerrno> in every file.
int get_errno();
void set_errno(int e);
// Returns the environment block (environ).
char** environment();
// Run-time symbol lookup (operator new's use of the C++ runtime):
// the definition of `symbol` that the library's own interposes, i.e. the
// next one in the global lookup order (dlsym RTLD_NEXT; allocates nothing),
// or nullptr.
void* next_symbol(const char* symbol);
// The address of `symbol` in the shared library `library` if the process
// has it loaded, in any scope (dlopen RTLD_NOLOAD: never loads it; may
// allocate), or nullptr.
void* loaded_symbol(const char* library, const char* symbol);
// Calls `fn(value)` when a thread that called set_thread_value() exits
// (pthread key destructor).  Does not allocate.
bool register_thread_exit(void (*fn)(void*));
void set_thread_value(void* value);
// pthread_atfork; may allocate, so call it only once malloc works.
void register_fork(void (*prepare)(), void (*parent)(), void (*child)());

}  // namespace pal
}  // namespace lazymalloc
