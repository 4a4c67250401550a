#include "common.h"

#include <chrono>
#include <exception>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "harness/sysinfo.h"

namespace lazybench {

void* checked_malloc(std::size_t size) {
  void* p = std::malloc(size);
  if (p == nullptr && size != 0)
    throw WorkloadError("malloc(" + std::to_string(size) + ") returned NULL");
  return p;
}

std::size_t touch_pages(void* p, std::size_t size, unsigned char value) {
  if (size == 0) return 0;
  auto* bytes = static_cast<volatile unsigned char*>(p);
  std::size_t pages = 0;
  for (std::size_t off = 0; off < size; off += kPageSize) {
    bytes[off] = value;
    ++pages;
  }
  bytes[size - 1] = value;
  return pages;
}

void sleep_seconds(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

double run_timed_threads(unsigned threads, double seconds,
                         const std::function<void(unsigned, const StopFlag&)>& body,
                         const std::function<void()>& on_start, const std::function<void()>& on_stop) {
  StopFlag stop;
  std::latch ready(static_cast<std::ptrdiff_t>(threads) + 1);
  std::latch go(1);
  std::mutex error_mutex;
  std::exception_ptr error;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.count_down();
      go.wait();
      try {
        body(t, stop);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        stop.stop();
      }
    });
  }
  ready.arrive_and_wait();
  if (on_start) on_start();
  const auto start = Clock::now();
  go.count_down();
  // Sleep in short slices so a failing worker ends the run early.
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (!stop.stopped() && Clock::now() < deadline) {
    const auto left = deadline - Clock::now();
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::milliseconds(50)));
  }
  stop.stop();
  for (auto& th : pool) th.join();
  const double elapsed = seconds_since(start);
  if (on_stop) on_stop();
  if (error) std::rethrow_exception(error);
  return elapsed;
}

}  // namespace lazybench
