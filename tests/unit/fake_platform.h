// A fake platform for deterministic tests of policy code: a manual clock,
// real (but recorded) reservations, and recorded advice that can be made to
// fail.
#pragma once

#include <cerrno>
#include <cstdint>
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

class FakePlatform {
 public:
  FakePlatform() { platform_ = {this, &reserve, &advise, &now, &read_file, &sleep}; }
  const Platform* get() const { return &platform_; }

  uint64_t now_ns = 1'000'000'000;  // starts at 1 s
  void advance_ms(uint64_t ms) { now_ns += ms * 1'000'000; }

  std::vector<AdviceCall> calls;
  int fail_free_with = 0;      // errno to return for MADV_FREE (0 = succeed)
  int fail_dontneed_with = 0;  // errno to return for MADV_DONTNEED
  bool fail_reserve = false;
  size_t reserves = 0;
  size_t advise_calls = 0;                   // platform calls (one per batch)
  std::map<std::string, std::string> files;  // canned /proc and cgroup files
  int64_t slept_ns = 0;
  size_t advised_bytes(Advice a) const {
    size_t n = 0;
    for (const auto& c : calls) n += c.advice == a ? c.len : 0;
    return n;
  }

 private:
  static void* reserve(void* ctx, size_t size, size_t align) {
    auto* self = static_cast<FakePlatform*>(ctx);
    if (self->fail_reserve) return nullptr;
    self->reserves++;
    return pal::map(size, align);
  }
  static int advise(void* ctx, const AdviseRange* r, unsigned n, Advice a, unsigned* calls) {
    auto* self = static_cast<FakePlatform*>(ctx);
    std::lock_guard<std::mutex> guard(self->advise_lock_);  // release workers advise in parallel
    self->advise_calls++;
    *calls = 1;
    int rc = a == Advice::kFree ? self->fail_free_with : self->fail_dontneed_with;
    if (rc) return rc;
    for (unsigned i = 0; i < n; ++i) {
      self->calls.push_back({reinterpret_cast<uintptr_t>(r[i].addr), r[i].len, a});
    }
    return 0;
  }
  static long read_file(void* ctx, const char* path, char* buf, size_t len) {
    auto* self = static_cast<FakePlatform*>(ctx);
    auto it = self->files.find(path);
    if (it == self->files.end() || len == 0) return -1;
    size_t n = it->second.size() < len - 1 ? it->second.size() : len - 1;
    it->second.copy(buf, n);
    buf[n] = '\0';
    return long(n);
  }
  static void sleep(void* ctx, int64_t ns) {
    auto* self = static_cast<FakePlatform*>(ctx);
    self->slept_ns += ns;
    self->now_ns += uint64_t(ns);
  }
  static uint64_t now(void* ctx) { return static_cast<FakePlatform*>(ctx)->now_ns; }

  Platform platform_;
  std::mutex advise_lock_;
};

}  // namespace lazymalloc::test
