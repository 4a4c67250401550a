// Helpers shared by the api/ and stress/ tests: byte patterns, scaling,
// running a check in a forked child, capturing stderr.
//
// LMT_HAVE_LAZYMALLOC is 1 when the test is linked against a lazymalloc
// library (the CMake build) and 0 in the standalone glibc build that checks
// the tests themselves (tests/run_standalone_glibc.sh).
#ifndef LAZYMALLOC_TESTS_COMMON_TEST_UTIL_H
#define LAZYMALLOC_TESTS_COMMON_TEST_UTIL_H

#ifndef LMT_HAVE_LAZYMALLOC
#define LMT_HAVE_LAZYMALLOC 1
#endif

#if LMT_HAVE_LAZYMALLOC
#include <lazymalloc/lazymalloc.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <functional>
#include <string>

namespace lmt {

// A size the compiler cannot see through (keeps GCC from folding or
// warning about deliberately impossible requests).
inline size_t Opaque(size_t x) {
  volatile size_t v = x;
  return v;
}

// Keeps an allocation observable so the call cannot be elided.
inline void Escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Pattern: 64-bit word i of block `id` is Mix64(id) + i * K (little endian),
// so any misplaced, zeroed or foreign byte is detected.
inline uint64_t PatternWord(uint64_t id, size_t word) {
  return Mix64(id) + static_cast<uint64_t>(word) * 0xD6E8FEB86659FD93ull;
}

inline void FillPattern(void* p, size_t n, uint64_t id) {
  unsigned char* b = static_cast<unsigned char*>(p);
  size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w = PatternWord(id, i);
    memcpy(b + i * 8, &w, 8);
  }
  if (n % 8) {
    uint64_t w = PatternWord(id, words);
    memcpy(b + words * 8, &w, n % 8);
  }
}

// Returns the offset of the first wrong byte, or SIZE_MAX if all n match.
inline size_t FindPatternMismatch(const void* p, size_t n, uint64_t id) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w = PatternWord(id, i);
    if (memcmp(b + i * 8, &w, 8) != 0) {
      for (size_t k = 0; k < 8; ++k)
        if (b[i * 8 + k] != reinterpret_cast<const unsigned char*>(&w)[k]) return i * 8 + k;
    }
  }
  if (n % 8) {
    uint64_t w = PatternWord(id, words);
    for (size_t k = 0; k < n % 8; ++k)
      if (b[words * 8 + k] != reinterpret_cast<const unsigned char*>(&w)[k]) return words * 8 + k;
  }
  return SIZE_MAX;
}

inline bool CheckPattern(const void* p, size_t n, uint64_t id) {
  return FindPatternMismatch(p, n, id) == SIZE_MAX;
}

// Offset of the first non-zero byte in [p, p+n), or SIZE_MAX.
inline size_t FindNonZero(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    if (w != 0) break;
  }
  for (; i < n; ++i)
    if (b[i] != 0) return i;
  return SIZE_MAX;
}

// A small deterministic xorshift generator for the stress tests.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(Mix64(seed) | 1) {}
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }
};

// LAZYMALLOC_TEST_SCALE (default 1.0) multiplies the iteration counts of
// the long tests; sanitizer builds set it lower.
inline double TestScale() {
  const char* s = getenv("LAZYMALLOC_TEST_SCALE");
  if (!s || !*s) return 1.0;
  double v = strtod(s, nullptr);
  if (!(v > 0)) return 1.0;
  if (v < 0.001) v = 0.001;
  if (v > 100) v = 100;
  return v;
}

inline size_t Scaled(size_t n, size_t minimum = 1) {
  double v = static_cast<double>(n) * TestScale();
  size_t r = static_cast<size_t>(v);
  return r < minimum ? minimum : r;
}

// Runs fn() in a forked child, which exits with fn's return value.  A child
// that does not finish within timeout_s is killed by SIGALRM.  Returns "" on
// exit status 0, else a description.  The child reports details on stderr.
inline std::string RunInChild(const std::function<int()>& fn, unsigned timeout_s = 120) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return std::string("fork failed: ") + strerror(errno);
  if (pid == 0) {
    alarm(timeout_s);
    int rc = fn();
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return std::string("waitpid failed: ") + strerror(errno);
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 0) return "";
    return "child exited with status " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string d = "child killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    if (sig == SIGALRM) d += " -- timed out (deadlock?)";
    return d;
  }
  return "child ended with raw status " + std::to_string(status);
}

#define LMT_CHILD_CHECK(cond)                                                          \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "child check failed at %s:%d: %s (errno=%d %s)\n", __FILE__,     \
              __LINE__, #cond, errno, strerror(errno));                                \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

// Current virtual size of this process (VmSize), in bytes; 0 if unknown.
inline size_t CurrentVmSize() {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "VmSize:", 7) == 0) {
      kb = strtoull(line + 7, nullptr, 10);
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

// Sets RLIMIT_AS to the current VmSize + headroom.  Returns false on failure.
inline bool LimitAddressSpace(size_t headroom) {
  size_t vm = CurrentVmSize();
  if (vm == 0) return false;
  struct rlimit rl;
  rl.rlim_cur = vm + headroom;
  rl.rlim_max = vm + headroom;
  return setrlimit(RLIMIT_AS, &rl) == 0;
}

// Runs fn with fd 2 redirected into a temporary file and returns what was
// written to it.
inline std::string CaptureStderr(const std::function<void()>& fn) {
  char path[] = "/tmp/lmt-stderr-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return "<mkstemp failed>";
  unlink(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string out;
  lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(r));
  close(fd);
  return out;
}

}  // namespace lmt

#endif  // LAZYMALLOC_TESTS_COMMON_TEST_UTIL_H
