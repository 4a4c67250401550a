// purge-latency: how long do page faults in one thread take while another
// thread gives a large region back to the kernel, for several batch sizes?
// This chooses lazymalloc's LAZYMALLOC_PURGE_BATCH default (docs/purge-batching.md).
//
// A "purger" thread madvises a touched region (default 1 GiB) in chunks of
// the batch size, back to back.  A "faulter" thread meanwhile drops and
// re-touches pages of its own 64 MiB region, timing each first touch (a page
// fault).  Reported per batch size: fault latency p50/p99/max during the
// purge, faults measured, and purge throughput.
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tool_util.h"

namespace {

using bench_tool::now_ns;
using bench_tool::parse_size;

std::string human(size_t b) {
  char buf[32];
  if (b >= (size_t(1) << 30)) snprintf(buf, sizeof buf, "%zu GiB", b >> 30);
  else if (b >= (size_t(1) << 20)) snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  else snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  size_t region = size_t(1) << 30;
  int advice = MADV_DONTNEED;
  bool huge = false;
  std::vector<size_t> batches = {64 << 10, 256 << 10, 1 << 20, 2 << 20, 8 << 20, 32 << 20,
                                 128 << 20, size_t(1) << 30};
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--region") && i + 1 < argc) region = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "--free")) advice = MADV_FREE;
    else if (!strcmp(argv[i], "--huge")) huge = true;
    else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
      batches.clear();
      for (char* tok = strtok(argv[++i], ","); tok; tok = strtok(nullptr, ",")) batches.push_back(parse_size(tok));
    } else {
      fprintf(stderr, "usage: purge-latency [--region SIZE] [--free] [--huge] [--batches a,b,c]\n");
      return 2;
    }
  }
  const size_t kFaultRegion = 64 << 20;
  char* r = static_cast<char*>(mmap(nullptr, region, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  char* f = static_cast<char*>(mmap(nullptr, kFaultRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (r == MAP_FAILED || f == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  madvise(r, region, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  madvise(f, kFaultRegion, MADV_NOHUGEPAGE);
  printf("| batch | fault p50 us | fault p99 us | fault max us | faults | purge GiB/s |\n");
  printf("|---:|---:|---:|---:|---:|---:|\n");
  // Baseline: faults with no purge running.
  for (int pass = -1; pass < int(batches.size()); ++pass) {
    size_t batch = pass < 0 ? 0 : batches[size_t(pass)];
    for (size_t off = 0; off < region; off += 4096) r[off] = 1;
    std::atomic<bool> go{false}, done{false};
    std::vector<uint32_t> lat;
    lat.reserve(1 << 20);
    std::thread faulter([&] {
      while (!go.load()) {
      }
      size_t page = 0;
      while (!done.load(std::memory_order_relaxed)) {
        char* p = f + (page % (kFaultRegion / 4096)) * 4096;
        madvise(p, 4096, MADV_DONTNEED);
        uint64_t t0 = now_ns();
        *reinterpret_cast<volatile char*>(p) = 1;
        lat.push_back(uint32_t(std::min<uint64_t>(now_ns() - t0, 0xffffffffu)));
        ++page;
      }
    });
    go = true;
    uint64_t t0 = now_ns();
    if (batch == 0) {
      while (now_ns() - t0 < 200000000) {
      }
    } else {
      for (size_t off = 0; off < region; off += batch) {
        madvise(r + off, std::min(batch, region - off), advice);
      }
    }
    uint64_t t1 = now_ns();
    done = true;
    faulter.join();
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double q) { return lat.empty() ? 0.0 : lat[size_t(q * double(lat.size() - 1))] / 1000.0; };
    double gibs = batch ? double(region) / double(1 << 30) / (double(t1 - t0) / 1e9) : 0;
    printf("| %s | %.1f | %.1f | %.1f | %zu | %s |\n", batch ? human(batch).c_str() : "no purge", pct(0.5),
           pct(0.99), lat.empty() ? 0.0 : lat.back() / 1000.0, lat.size(),
           batch ? std::to_string(gibs).substr(0, 5).c_str() : "-");
    fflush(stdout);
  }
  return 0;
}
