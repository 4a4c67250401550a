// idle-probe: what an allocator costs a process that has gone idle.
//
// Churns `churn` MiB of `size`-byte blocks (every byte written), frees all
// but every `stride`-th block (256 MiB / 32 leaves 8 MiB live, spread over
// the heap), sleeps `settle` seconds for the allocator's decay to run, then
// measures a `window` of idle sleep with getrusage(2): context switches
// (wakeups) and CPU time of every thread but the sleeping main thread,
// threads that ended during the window included.  Prints one line of
// key=value pairs; memory from /proc/self/smaps_rollup (held = Rss -
// LazyFree) after the churn, after the settle time and after the window.
//
//   LD_PRELOAD=build/liblazymalloc.so build/idle-probe [churn_mib size stride settle_s window_s]
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static void rollup(long* rss_kb, long* lazy_kb) {
  *rss_kb = *lazy_kb = 0;
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    sscanf(line, "Rss: %ld", rss_kb);
    sscanf(line, "LazyFree: %ld", lazy_kb);
  }
  fclose(f);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static double tv_ms(struct timeval tv) { return (double)tv.tv_sec * 1e3 + (double)tv.tv_usec / 1e3; }

struct usage {
  double cpu_ms;
  long switches;
};

// The whole process less the calling thread.
static struct usage others(void) {
  struct rusage self, me;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_THREAD, &me);
  struct usage u;
  u.cpu_ms = tv_ms(self.ru_utime) + tv_ms(self.ru_stime) - tv_ms(me.ru_utime) - tv_ms(me.ru_stime);
  u.switches = self.ru_nvcsw + self.ru_nivcsw - me.ru_nvcsw - me.ru_nivcsw;
  return u;
}

int main(int argc, char** argv) {
  size_t churn_mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
  size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 65536;
  size_t stride = argc > 3 ? strtoul(argv[3], NULL, 0) : 32;
  double settle = argc > 4 ? atof(argv[4]) : 20;
  double window = argc > 5 ? atof(argv[5]) : 10;
  size_t n = churn_mib * 1024 * 1024 / size;
  char** blocks = malloc(n * sizeof *blocks);
  if (!blocks) return 1;
  for (size_t i = 0; i < n; ++i) {
    blocks[i] = malloc(size);
    if (!blocks[i]) return 1;
    memset(blocks[i], (int)(i | 1), size);
  }
  size_t live = 0;
  for (size_t i = 0; i < n; ++i) {
    if (stride && i % stride == 0) {
      live += size;
      continue;
    }
    free(blocks[i]);
    blocks[i] = NULL;
  }
  long rss0, lazy0, rss1, lazy1, rss2, lazy2;
  rollup(&rss0, &lazy0);
  sleep_s(settle);
  rollup(&rss1, &lazy1);
  struct usage a = others();
  sleep_s(window);
  struct usage b = others();
  rollup(&rss2, &lazy2);
  printf("live_kb=%zu freed_rss_kb=%ld freed_held_kb=%ld settled_rss_kb=%ld settled_held_kb=%ld "
         "end_rss_kb=%ld end_held_kb=%ld wakeups_per_s=%.3f cpu_ms_per_s=%.4f\n",
         live / 1024, rss0, rss0 - lazy0, rss1, rss1 - lazy1, rss2, rss2 - lazy2,
         (double)(b.switches - a.switches) / window, (b.cpu_ms - a.cpu_ms) / window);
  for (size_t i = 0; i < n; ++i) free(blocks[i]);
  free(blocks);
  return 0;
}
