// release-scaling: how fast do lazymalloc's release workers give a freed,
// touched huge block back to the kernel, with 1, 2 and all workers, for
// 4 KiB-page and hugepage (THP) memory, against one inline munmap of the
// same region?
//
// Each measurement runs in a fresh process (this program runs itself again
// with LAZYMALLOC_* set, through lazybench's spawn()), because hugepage advice is fixed when an
// arena is reserved.  The child allocates --size, writes every page, frees
// it and polls the `release_inflight_bytes` statistic until the release has
// finished; advice is MADV_DONTNEED (LAZYMALLOC_PURGE_ADVICE=dontneed), so
// the kernel really frees every page, as munmap does.  The baseline maps
// the same size itself (MADV_HUGEPAGE for the THP rows), writes it and
// times munmap.
//
// Usage: release-scaling [--size 1G] [--reps 3] [--workers 1,2,N]
// Prints a Markdown table: median ms, GiB/s, speedup over munmap.
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lazymalloc/lazymalloc.h"

#include "subprocess.h"
#include "tool_util.h"

namespace {

using bench_tool::now_ns;
using bench_tool::parse_size;

void touch(char* p, size_t n) {
  for (size_t off = 0; off < n; off += 4096) p[off] = 1;
}

// Child: one release by lazymalloc's workers; prints the release time in ms.
int child_release(size_t size) {
  char* p = static_cast<char*>(lazymalloc_malloc(size));
  if (!p) return 1;
  touch(p, size);
  uint64_t t0 = now_ns();
  lazymalloc_free(p);
  uint64_t inflight = 1;
  while (lazymalloc_stat_get("release_inflight_bytes", &inflight) == 0 && inflight != 0) usleep(100);
  double ms = double(now_ns() - t0) / 1e6;
  uint64_t workers = 0, helped = 0;
  lazymalloc_stat_get("release_threads", &workers);
  lazymalloc_stat_get("release_helped_chunks", &helped);
  printf("%.3f %llu %llu\n", ms, (unsigned long long)workers, (unsigned long long)helped);
  return 0;
}

// Child: the baseline, one munmap of a touched mapping, in ms.
int child_munmap(size_t size, bool huge) {
  const size_t align = 2 << 20;
  char* raw = static_cast<char*>(
      mmap(nullptr, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (raw == MAP_FAILED) return 1;
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + align - 1) & ~(align - 1));
  madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  touch(p, size);
  uint64_t t0 = now_ns();
  munmap(p, size);
  printf("%.3f 0 0\n", double(now_ns() - t0) / 1e6);
  return 0;
}

// Runs this program as a child with `env` and argv `args`; the first number
// it prints, or -1 when it fails.
double run_child(const char* self, const lazybench::EnvChanges& env, const std::vector<std::string>& args) {
  lazybench::SpawnOptions o;
  o.env = env;
  o.stderr_to = lazybench::SpawnOptions::Stderr::kInherit;
  std::vector<std::string> argv{self};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = lazybench::spawn(argv, o);
  return r.ok() ? atof(r.out.c_str()) : -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t size = size_t(1) << 30;
  int reps = 3;
  std::vector<int> workers;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--child-release" && i + 1 < argc) return child_release(parse_size(argv[i + 1]));
    if (a == "--child-munmap" && i + 2 < argc) return child_munmap(parse_size(argv[i + 1]), atoi(argv[i + 2]) != 0);
    if (a == "--size" && i + 1 < argc) {
      size = parse_size(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (a == "--workers" && i + 1 < argc) {
      for (char* t = strtok(argv[++i], ","); t; t = strtok(nullptr, ",")) {
        workers.push_back(strcmp(t, "N") == 0 ? int(sysconf(_SC_NPROCESSORS_ONLN)) : atoi(t));
      }
    } else {
      fprintf(stderr, "usage: %s [--size 1G] [--reps 3] [--workers 1,2,N]\n", argv[0]);
      return 2;
    }
  }
  if (workers.empty()) workers = {1, 2, int(sysconf(_SC_NPROCESSORS_ONLN))};
  std::sort(workers.begin(), workers.end());
  workers.erase(std::unique(workers.begin(), workers.end()), workers.end());
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = 0;
  std::string sz = std::to_string(size);
  double gib = double(size) / double(1u << 30);
  printf("release of a touched %.2f GiB block, median of %d (CPUs: %ld)\n\n", gib, reps,
         sysconf(_SC_NPROCESSORS_ONLN));
  printf("| pages | releaser | ms | GiB/s | speedup vs munmap |\n|---|---|---|---|---|\n");
  for (int huge = 0; huge <= 1; ++huge) {
    const char* kind = huge ? "THP 2 MiB" : "4 KiB";
    std::vector<double> base;
    std::vector<std::vector<double>> per(workers.size());
    // Interleaved repetitions, so drift in machine load hits every row alike.
    for (int r = 0; r < reps; ++r) {
      base.push_back(run_child(self, {}, {"--child-munmap", sz, huge ? "1" : "0"}));
      for (size_t w = 0; w < workers.size(); ++w) {
        per[w].push_back(run_child(self,
                                   {{"LAZYMALLOC_HUGEPAGES", std::to_string(huge)},
                                    {"LAZYMALLOC_RELEASE_WORKERS", std::to_string(workers[w])},
                                    {"LAZYMALLOC_PURGE_ADVICE", "dontneed"},
                                    {"LAZYMALLOC_HUGE_RETAIN", "0"}},
                                   {"--child-release", sz}));
      }
    }
    double b = median(base);
    printf("| %s | inline munmap | %.1f | %.1f | 1.00x |\n", kind, b, gib / (b / 1000));
    for (size_t w = 0; w < workers.size(); ++w) {
      double m = median(per[w]);
      printf("| %s | %d worker%s | %.1f | %.1f | %.2fx |\n", kind, workers[w], workers[w] == 1 ? "" : "s", m,
             gib / (m / 1000), b / m);
    }
    fflush(stdout);
  }
  return 0;
}
