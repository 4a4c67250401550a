// The program bench.run_tool.timeline samples: phases of memory use, each
// held until lazymalloc-run has written two more rows (it counts them on the
// timeline page, src/core/timeline.h, whose descriptor the program finds in
// LAZYMALLOC_TIMELINE_FD), so every phase is in the TSV however slow the
// machine is.  Phases: idle; 64 MiB allocated and written; all freed
// (active falls, retained rises, Rss stays; a 768 KiB block stays in the
// thread's large cache: cached); malloc_trim (retained, cached and Rss fall).  Exit 0, or 1 with a message.
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/timeline.h"

namespace {

const lazymalloc::TimelinePage* g_page;

bool wait_samples(int n) {
  const uint64_t target = g_page->samples.load(std::memory_order_acquire) + uint64_t(n);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (g_page->samples.load(std::memory_order_acquire) < target) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling, not a guess
  }
  return true;
}

}  // namespace

int main() {
  const char* fd_text = std::getenv("LAZYMALLOC_TIMELINE_FD");
  if (!fd_text) {
    std::fprintf(stderr, "timeline_phases: no LAZYMALLOC_TIMELINE_FD (run it under lazymalloc-run --timeline)\n");
    return 1;
  }
  void* map = mmap(nullptr, lazymalloc::TimelinePage::kSize, PROT_READ, MAP_SHARED, std::atoi(fd_text), 0);
  if (map == MAP_FAILED) {
    std::perror("timeline_phases: mmap");
    return 1;
  }
  g_page = static_cast<const lazymalloc::TimelinePage*>(map);
  constexpr int kBlocks = 256;
  constexpr size_t kBlock = size_t(256) << 10;  // 64 MiB in all
  static char* blocks[kBlocks];
  bool ok = wait_samples(2);
  for (auto& b : blocks) {
    b = static_cast<char*>(std::malloc(kBlock));
    if (!b) return 1;
    std::memset(b, 0x5a, kBlock);
  }
  // And one large block, which its free leaves in this thread's large cache
  // (the page's cached bytes) until malloc_trim.  The cache takes blocks
  // once the thread has allocated one after a free (it warms): a block
  // freed first goes back to the backend, and `large`'s malloc warms it.
  static char* volatile first;  // (volatile: a malloc/free pair the compiler would drop)
  first = static_cast<char*>(std::malloc(size_t(768) << 10));
  if (!first) return 1;
  std::free(first);
  char* large = static_cast<char*>(std::malloc(size_t(768) << 10));
  if (!large) return 1;
  std::memset(large, 0x5b, size_t(768) << 10);
  ok = ok && wait_samples(2);
  std::free(large);  // first: every row with the 64 MiB freed has it cached
  for (auto& b : blocks) std::free(b);
  ok = ok && wait_samples(2);
  malloc_trim(0);
  ok = ok && wait_samples(2);
  if (!ok) std::fprintf(stderr, "timeline_phases: lazymalloc-run stopped sampling\n");
  return ok ? 0 : 1;
}
