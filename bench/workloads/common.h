// Helpers shared by the workloads: timed worker threads, page touching,
// checked malloc, and an optimisation barrier.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

namespace lazybench {

inline constexpr std::size_t kPageSize = 4096;

// Tells the compiler the pointee escapes, so malloc/free pairs and stores are
// not optimised away (GCC may otherwise delete malloc+free of unused memory).
inline void escape(const void* p) { asm volatile("" : : "g"(p) : "memory"); }

// malloc that throws on NULL, so a failure becomes a clear error.
void* checked_malloc(std::size_t size);

// Writes one byte in every page of [p, p+size) (and the last byte), so the
// memory becomes resident.  Returns the number of pages touched.
std::size_t touch_pages(void* p, std::size_t size, unsigned char value = 1);

// A stop flag that worker loops poll.
class StopFlag {
 public:
  bool stopped() const { return flag_.load(std::memory_order_relaxed); }
  void stop() { flag_.store(true, std::memory_order_relaxed); }

 private:
  std::atomic<bool> flag_{false};
};

// Starts `threads` threads running body(index, stop), waits until all have
// started, calls on_start(), sleeps `seconds`, raises the stop flag, joins
// them, then calls on_stop().  Returns the wall time between on_start() and
// the moment the last thread finished.  Exceptions thrown by a body are
// rethrown here.
double run_timed_threads(unsigned threads, double seconds,
                         const std::function<void(unsigned index, const StopFlag& stop)>& body,
                         const std::function<void()>& on_start, const std::function<void()>& on_stop);

// Sleeps for `seconds` (fractional).
void sleep_seconds(double seconds);

// Thrown by workloads on a failed check.
struct WorkloadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace lazybench
