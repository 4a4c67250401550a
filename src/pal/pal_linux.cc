// The Linux platform layer.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pal/pal.h"

extern char** environ;

namespace lazymalloc::pal {

namespace {

uint64_t now_ns();

void* map(size_t size, size_t align) {
  // Over-reserve and trim so the result is aligned; the kernel only hands
  // out page alignment.
  size_t extra = align > 4096 ? align : 0;
  if (size + extra < size) {
    errno = ENOMEM;
    return nullptr;
  }
  void* p = mmap(nullptr, size + extra, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (!extra) return p;
  uintptr_t base = reinterpret_cast<uintptr_t>(p);
  uintptr_t aligned = (base + align - 1) & ~(uintptr_t(align) - 1);
  if (aligned > base) munmap(p, aligned - base);
  uintptr_t end = aligned + size;
  uintptr_t map_end = base + size + extra;
  if (map_end > end) munmap(reinterpret_cast<void*>(end), map_end - end);
  return reinterpret_cast<void*>(aligned);
}

void unmap(void* addr, size_t size) {
  int saved = errno;
  munmap(addr, size);
  errno = saved;
}

bool protect(void* addr, size_t size, bool accessible) {
  int saved = errno;
  bool ok = mprotect(addr, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
  errno = saved;
  return ok;
}

uint64_t random_seed() {
  int saved = errno;
  uint64_t v = 0;
  if (syscall(SYS_getrandom, &v, sizeof v, 0) != long(sizeof v)) {
    // No getrandom (old kernel, seccomp): the clock and an address.
    v = now_ns() ^ (reinterpret_cast<uintptr_t>(&v) << 16);
  }
  errno = saved;
  return v;
}

int advise(void* addr, size_t size, Advice advice) {
  int saved = errno;
  int a = advice == Advice::kFree ? MADV_FREE : MADV_DONTNEED;
  int rc = madvise(addr, size, a) == 0 ? 0 : errno;
  errno = saved;
  return rc;
}

long advise_vector(const AdviseRange* ranges, unsigned n, Advice advice) {
  constexpr unsigned kMaxIov = 64;
  if (n > kMaxIov) return -E2BIG;
  int saved = errno;
  int a = advice == Advice::kFree ? MADV_FREE : MADV_DONTNEED;
  struct iovec iov[kMaxIov];
  for (unsigned i = 0; i < n; ++i) {
    iov[i].iov_base = ranges[i].addr;
    iov[i].iov_len = ranges[i].len;
  }
  long r;
  int fd = int(syscall(SYS_pidfd_open, getpid(), 0));
  if (fd < 0) {
    r = -errno;
  } else {
    r = syscall(SYS_process_madvise, fd, iov, n, a, 0);
    if (r < 0) r = -errno;
    close(fd);
  }
  errno = saved;
  return r;
}

long read_file(const char* path, char* buf, size_t len) {
  int saved = errno;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    errno = saved;
    return -1;
  }
  size_t got = 0;
  while (got + 1 < len) {
    ssize_t r = read(fd, buf + got, len - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += size_t(r);
  }
  close(fd);
  buf[got] = '\0';
  errno = saved;
  return long(got);
}


// A virtio-balloon device offering free page reporting: its `features`
// file (one '0'/'1' per feature bit, bit 0 first) has bit 5
// (VIRTIO_BALLOON_F_REPORTING) set.  The driver's directory lists its
// devices (virtio0, virtio1, ...) beside bind, uevent and unbind: read with
// getdents64, no libc directory stream (which would malloc).
bool host_reports_free_pages() {
  constexpr unsigned kReportingBit = 5;
  static constexpr char kDir[] = "/sys/bus/virtio/drivers/virtio_balloon";
  int saved = errno;
  int fd = open(kDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    errno = saved;
    return false;
  }
  struct Dirent {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[1];
  };
  alignas(8) char buf[1024];
  bool reports = false;
  long n;
  while (!reports && (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
    for (long pos = 0; pos < n && !reports;) {
      const auto* d = reinterpret_cast<const Dirent*>(buf + pos);
      pos += d->reclen;
      const char* name = d->name;
      if (__builtin_strncmp(name, "virtio", 6) != 0) continue;
      char path[128];
      size_t len = sizeof kDir - 1;
      __builtin_memcpy(path, kDir, len);
      path[len++] = '/';
      for (size_t i = 0; name[i] && len + 10 < sizeof path; ++i) path[len++] = name[i];
      __builtin_memcpy(path + len, "/features", 10);
      char features[64];
      reports = read_file(path, features, sizeof features) > long(kReportingBit) && features[kReportingBit] == '1';
    }
  }
  close(fd);
  errno = saved;
  return reports;
}

void advise_hugepage(void* addr, size_t size, bool huge) {
  int saved = errno;
  madvise(addr, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  errno = saved;
}

long resident_pages(void* addr, size_t len) {
  int saved = errno;
  unsigned char vec[256];
  long n = 0;
  char* p = static_cast<char*>(addr);
  size_t pages = len / 4096;
  while (pages) {
    size_t k = pages < sizeof vec ? pages : sizeof vec;
    if (mincore(p, k * 4096, vec) != 0) {
      errno = saved;
      return -1;
    }
    for (size_t i = 0; i < k; ++i) n += vec[i] & 1;
    p += k * 4096;
    pages -= k;
  }
  errno = saved;
  return n;
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

[[noreturn]] void fatal_mapping_lost(void* addr, size_t len) {
  (void)addr;
  (void)len;
  static const char msg[] = "lazymalloc: mremap left a hole in the heap that mmap cannot fill\n";
  fatal(msg, sizeof msg - 1);
}

// Maps fresh anonymous memory over [addr, addr + size) (our own reservation).
bool map_fixed(void* addr, size_t size, bool huge) {
  void* p = mmap(addr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                 -1, 0);
  if (p != addr) return false;
  if (huge) madvise(addr, size, MADV_HUGEPAGE);
  return true;
}

bool move_pages(void* from, size_t len, void* to, bool huge) {
  int saved = errno;
  // MREMAP_DONTUNMAP (Linux 5.7+) leaves `from` mapped and empty: the page
  // tables move (a PMD at a time for hugepages), nothing is copied.
  void* r = mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to);
  bool ok = r == to;
  if (!ok) {
    // The destination may already be unmapped by the failed call: make it
    // ours again before trying the move that leaves a hole at `from`.
    if (!map_fixed(to, len, huge)) fatal_mapping_lost(to, len);
    r = mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
    ok = r == to;
    if (ok && !map_fixed(from, len, huge)) fatal_mapping_lost(from, len);
    if (!ok && !map_fixed(to, len, huge)) fatal_mapping_lost(to, len);
  }
  errno = saved;
  return ok;
}

uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

uint64_t thread_cpu_ns() {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  int saved = errno;
  struct timespec ts;
  struct timespec* tp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = timeout_ns / 1000000000;
    ts.tv_nsec = timeout_ns % 1000000000;
    tp = &ts;
  }
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, tp, nullptr, 0);
  errno = saved;
}

bool process_barrier(bool setup) {
  int saved = errno;
  long r = syscall(SYS_membarrier,
                   setup ? MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED : MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  errno = saved;
  return r == 0;
}

void futex_wake(std::atomic<uint32_t>* word, int count) {
  int saved = errno;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
  errno = saved;
}

int process_id() { return int(getpid()); }

uint64_t wall_clock_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000u + uint64_t(ts.tv_nsec) / 1000000u;
}

int open_append(const char* path) {
  int saved = errno;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fd = -errno;
  errno = saved;
  return fd;
}

void close_fd(int fd) {
  int saved = errno;
  close(fd);
  errno = saved;
}

void* map_shared_fd(int fd, size_t size) {
  int saved = errno;
  struct stat st;
  void* p = nullptr;
  // Only a regular file (or memfd) long enough: touching a mapping past the
  // end of its file would raise SIGBUS.
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= off_t(size)) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) p = nullptr;
  }
  errno = saved;
  return p;
}


int dup_fd(int fd) {
  int saved = errno;
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 100);
  errno = saved;
  return d >= 0 ? d : fd;
}

void write_fd(int fd, const char* buf, size_t len) {
  int saved = errno;
  while (len) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf += n;
    len -= size_t(n);
  }
  errno = saved;
}

int cpu_count() {
  // The CPUs this process may run on (taskset, cpusets), else those online.
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

void set_background_priority() {
  // SCHED_BATCH: the scheduler does not let this thread preempt the one it
  // woke up from (free() handing work over returns at once on a busy CPU).
  struct sched_param sp = {};
  int saved = errno;
  sched_setscheduler(0, SCHED_BATCH, &sp);
  errno = saved;
}

bool start_thread(void* (*fn)(void*), void* arg) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int saved = errno;
  int rc = pthread_create(&t, &attr, fn, arg);
  errno = saved;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  return rc == 0;
}

}  // namespace

void fatal(const char* msg, size_t len) {
  write_fd(2, msg, len);
  abort();
}

int get_errno() { return errno; }
void set_errno(int e) { errno = e; }
void* next_symbol(const char* symbol) { return dlsym(RTLD_NEXT, symbol); }

void* loaded_symbol(const char* library, const char* symbol) {
  void* lib = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return nullptr;
  void* p = dlsym(lib, symbol);
  dlclose(lib);  // drops the reference RTLD_NOLOAD took; the library stays
  return p;
}

char** environment() { return environ; }

namespace {
pthread_key_t g_exit_key;
bool g_exit_key_ok = false;
}  // namespace

bool register_thread_exit(void (*fn)(void*)) {
  g_exit_key_ok = pthread_key_create(&g_exit_key, fn) == 0;
  return g_exit_key_ok;
}

void set_thread_value(void* value) {
  if (g_exit_key_ok) pthread_setspecific(g_exit_key, value);
}

void register_fork(void (*prepare)(), void (*parent)(), void (*child)()) {
  pthread_atfork(prepare, parent, child);
}

namespace {

// The Platform entries: the functions above, with the context they ignore.
void* linux_reserve(void*, size_t size, size_t align) { return map(size, align); }
int linux_advise(void*, void* addr, size_t len, Advice a) { return advise(addr, len, a); }
long linux_advise_vector(void*, const AdviseRange* r, unsigned n, Advice a) { return advise_vector(r, n, a); }
uint64_t linux_now(void*) { return now_ns(); }
long linux_read_file(void*, const char* path, char* buf, size_t len) { return read_file(path, buf, len); }
void linux_wait(void*, std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  futex_wait(word, expected, timeout_ns);
}
void linux_wake(void*, std::atomic<uint32_t>* word) { futex_wake(word, 1 << 30); }
void linux_wake_one(void*, std::atomic<uint32_t>* word) { futex_wake(word, 1); }
uint64_t linux_thread_cpu(void*) { return thread_cpu_ns(); }
void* linux_map(void*, size_t size) { return map(size, 4096); }
void linux_unmap(void*, void* addr, size_t size) { unmap(addr, size); }
void linux_hugepage(void*, void* addr, size_t size, bool huge) { advise_hugepage(addr, size, huge); }
bool linux_start_thread(void*, void* (*fn)(void*), void* arg) { return start_thread(fn, arg); }
bool linux_process_barrier(void*, bool setup) { return process_barrier(setup); }
bool linux_protect(void*, void* addr, size_t size, bool accessible) { return protect(addr, size, accessible); }
bool linux_move_pages(void*, void* from, size_t len, void* to, bool huge) { return move_pages(from, len, to, huge); }
uint64_t linux_random(void*) { return random_seed(); }
unsigned linux_cpu_count(void*) { return cpu_count(); }
void linux_background_priority(void*) { set_background_priority(); }
void linux_write(void*, int fd, const char* buf, size_t len) { write_fd(fd, buf, len); }
int linux_dup_fd(void*, int fd) { return dup_fd(fd); }
int linux_open_append(void*, const char* path) { return open_append(path); }
void linux_close_fd(void*, int fd) { close_fd(fd); }
int linux_process_id(void*) { return process_id(); }
uint64_t linux_wall_clock_ms(void*) { return wall_clock_ms(); }
void* linux_map_shared_fd(void*, int fd, size_t size) { return map_shared_fd(fd, size); }
long linux_resident_pages(void*, void* addr, size_t len) { return resident_pages(addr, len); }
bool linux_host_reports_free_pages(void*) { return host_reports_free_pages(); }

constexpr Platform kLinux = {
    .ctx = nullptr,
    .reserve = linux_reserve,
    .advise = linux_advise,
    .now_ns = linux_now,
    .read_file = linux_read_file,
    .wait = linux_wait,
    .wake = linux_wake,
    .thread_cpu_ns = linux_thread_cpu,
    .advise_vector = linux_advise_vector,
    .map = linux_map,
    .unmap = linux_unmap,
    .advise_hugepage = linux_hugepage,
    .start_thread = linux_start_thread,
    .process_barrier = linux_process_barrier,
    .wake_one = linux_wake_one,
    .protect = linux_protect,
    .move_pages = linux_move_pages,
    .random = linux_random,
    .cpu_count = linux_cpu_count,
    .background_priority = linux_background_priority,
    .write = linux_write,
    .dup_fd = linux_dup_fd,
    .open_append = linux_open_append,
    .close_fd = linux_close_fd,
    .process_id = linux_process_id,
    .wall_clock_ms = linux_wall_clock_ms,
    .map_shared_fd = linux_map_shared_fd,
    .resident_pages = linux_resident_pages,
    .host_reports_free_pages = linux_host_reports_free_pages,
};

// Zero in .bss (no relocation): nullptr stands for kLinux.
std::atomic<const Platform*> g_lock_platform{nullptr};

}  // namespace

const Platform& linux_platform() { return kLinux; }

const Platform& lock_platform() {
  const Platform* p = g_lock_platform.load(std::memory_order_relaxed);
  return p ? *p : kLinux;
}

void set_lock_platform(const Platform* platform) { g_lock_platform.store(platform, std::memory_order_relaxed); }

}  // namespace lazymalloc::pal
