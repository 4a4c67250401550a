// Waiting in tests for something another thread, the allocator's own
// threads or the kernel bring about.  A test never sleeps a fixed time and
// then asserts: it polls the condition until it holds, and fails only when
// a generous deadline has passed (so a loaded machine slows it down but
// does not fail it).  Used by the unit, engine, api and stress tests.
#ifndef LAZYMALLOC_TESTS_COMMON_WAIT_H
#define LAZYMALLOC_TESTS_COMMON_WAIT_H

#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace lmt {

// Deadline for a condition that normally holds within milliseconds.
inline constexpr std::chrono::seconds kGenerousDeadline{30};

// Polls pred() until it returns true or `timeout` has passed; returns
// pred()'s last value.  Between two polls the caller's thread pauses for a
// millisecond, so that polling a costly predicate (a /proc file) does not
// take the CPU from the threads it waits for; the pause decides nothing.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout = kGenerousDeadline) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // poll interval
  }
}

// The scheduler state of thread `tid` of this process, from
// /proc/self/task/TID/stat: 'R' running, 'S' sleeping in the kernel (a
// futex wait, for instance), ...; 0 if the thread does not exist (any more).
inline char ThreadState(pid_t tid) {
  std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  FILE* f = fopen(path.c_str(), "r");
  if (!f) return 0;
  char buf[512];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  // "TID (COMM) STATE ...": COMM may contain spaces and parentheses.
  std::string s(buf);
  size_t close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return 0;
  return s[close + 2];
}

// True once thread `tid` of this process has ended completely (its
// thread-local destructors and the C library's teardown done; the kernel
// task gone, or dead and waiting to be reaped).
inline bool ThreadGone(pid_t tid) {
  char s = ThreadState(tid);
  return s == 0 || s == 'Z' || s == 'X';
}

}  // namespace lmt

#endif  // LAZYMALLOC_TESTS_COMMON_WAIT_H
