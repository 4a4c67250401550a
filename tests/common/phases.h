// Threads of a test taking turns: one sets the phase, another waits until
// the phase is reached (a mutex and a condition variable, no sleeps).
#pragma once

#include <condition_variable>
#include <mutex>

namespace lmt {

class Phases {
 public:
  void set(int phase) {
    {
      std::lock_guard<std::mutex> lock(m_);
      phase_ = phase;
    }
    cv_.notify_all();
  }
  void wait(int phase) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return phase_ == phase; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int phase_ = 0;
};

}  // namespace lmt
