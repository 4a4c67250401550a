// Helpers shared by the engine tests (real kernel): residency and statistics.
#pragma once

#include <gtest/gtest.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "lazymalloc/lazymalloc.h"

namespace {

// Pages of [p, p+len) resident according to mincore.
size_t resident_pages(void* p, size_t len) {
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(page - 1);
  size_t n = (len + page - 1) / page;
  std::vector<unsigned char> vec(n);
  if (mincore(reinterpret_cast<void*>(a), n * page, vec.data()) != 0) return SIZE_MAX;
  size_t r = 0;
  for (unsigned char v : vec) r += v & 1;
  return r;
}

uint64_t stat(const char* name) {
  uint64_t v = 0;
  EXPECT_EQ(lazymalloc_stat_get(name, &v), 0) << name;
  return v;
}

}  // namespace
