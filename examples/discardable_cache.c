/* A cache of regenerable buffers on lazymalloc's discardable memory.
 *
 * Each entry holds an expensive-to-compute buffer (here: a "decoded" tile
 * made from its index).  While the cache is not using an entry it unlocks
 * it, so lazymalloc may drop it when memory is short; the next lookup locks
 * it and regenerates it if it was dropped.  The program fills the cache,
 * simulates a memory-pressure event (lazymalloc_pressure_notify, as a PSI
 * stall or a cgroup limit would trigger from the background thread) while
 * holding a few entries locked, and shows that the locked ones survived and
 * the others were regenerated with identical contents.
 *
 *   build/discardable_cache            (exit status 0 when all checks pass)
 */
#include <lazymalloc/lazymalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define ENTRIES 16
#define TILE (256 * 1024)

struct entry {
  unsigned char* data; /* discardable block, unlocked while not in use */
  unsigned regenerations;
};

static struct entry cache[ENTRIES];

/* The expensive part: what a decoder would produce for tile `i`. */
static void generate(unsigned i, unsigned char* out) {
  uint32_t x = 2654435761u * (i + 1);
  for (size_t k = 0; k < TILE; ++k) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[k] = (unsigned char)x;
  }
}

/* Locks entry `i` and returns its data, regenerating it if it was discarded.
 * The caller unlocks it with release() when done. */
static unsigned char* acquire(unsigned i) {
  struct entry* e = &cache[i];
  if (!e->data) {
    e->data = lazymalloc_discardable_alloc(TILE); /* born locked */
    if (!e->data) return NULL;
    generate(i, e->data);
    e->regenerations++;
    return e->data;
  }
  int r = lazymalloc_discardable_lock(e->data);
  if (r < 0) return NULL;
  if (r == LAZYMALLOC_DISCARDABLE_DISCARDED) { /* the pages read as zero: rebuild */
    generate(i, e->data);
    e->regenerations++;
  }
  return e->data;
}

static void release(unsigned i) { lazymalloc_discardable_unlock(cache[i].data); }

static uint64_t stat(const char* name) {
  uint64_t v = 0;
  lazymalloc_stat_get(name, &v);
  return v;
}

int main(void) {
  static unsigned char expect[TILE];
  int ok = 1;
  /* Fill the cache.  Entries 0..3 stay in use (locked) while memory runs
   * short; the others are unlocked. */
  for (unsigned i = 0; i < ENTRIES; ++i) {
    if (!acquire(i)) return 1;
    if (i >= 4) release(i);
  }
  size_t freed = lazymalloc_pressure_notify();
  printf("pressure event: %zu bytes given back, %llu entries discarded\n", freed,
         (unsigned long long)stat("discards"));
  for (unsigned i = 0; i < 4; ++i) release(i);
  /* Use every entry again: the locked ones are intact, the rest regenerate. */
  for (unsigned i = 0; i < ENTRIES; ++i) {
    unsigned char* d = acquire(i);
    generate(i, expect);
    if (!d || memcmp(d, expect, TILE) != 0) ok = 0;
    unsigned want = i < 4 ? 1 : 2;
    if (cache[i].regenerations != want) ok = 0;
    release(i);
  }
  printf("lock hits %llu, misses %llu; locked entries kept, the others regenerated: %s\n",
         (unsigned long long)stat("discardable_lock_hits"),
         (unsigned long long)stat("discardable_lock_misses"), ok ? "yes" : "NO");
  for (unsigned i = 0; i < ENTRIES; ++i) lazymalloc_discardable_free(cache[i].data);
  return ok ? 0 : 1;
}
