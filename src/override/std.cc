// The standard allocation API under its usual names, overriding glibc's when
// the library is preloaded or linked.  Every function behaves as glibc 2.36's
// does, errno included (see tests/api).
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bits.h"
#include "frontend/heap.h"
#include "lazymalloc/lazymalloc.h"

using namespace lazymalloc;

#define LM_EXPORT extern "C" __attribute__((visibility("default")))

// malloc and free take the fast paths in their own bodies where the library
// is linked with LTO (src/CMakeLists.txt).
#define LM_FAST LM_EXPORT __attribute__((flatten))

LM_FAST void* malloc(size_t size) { return lm_malloc(size); }
LM_FAST void free(void* p) { lm_free(p); }
LM_EXPORT void cfree(void* p) { lm_free(p); }
LM_EXPORT void* calloc(size_t count, size_t size) { return lm_calloc(count, size); }
LM_EXPORT void* realloc(void* p, size_t size) { return lm_realloc(p, size); }

LM_EXPORT void* reallocarray(void* p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return lm_realloc(p, total);
}

LM_EXPORT void* memalign(size_t alignment, size_t size) { return lazymalloc_aligned_alloc(alignment, size); }
LM_EXPORT void* aligned_alloc(size_t alignment, size_t size) { return lazymalloc_aligned_alloc(alignment, size); }

LM_EXPORT int posix_memalign(void** out, size_t alignment, size_t size) {
  return lazymalloc_posix_memalign(out, alignment, size);
}

LM_EXPORT void* valloc(size_t size) { return lazymalloc_aligned_alloc(kOsPageSize, size); }

LM_EXPORT void* pvalloc(size_t size) {
  size_t rounded;
  if (__builtin_add_overflow(size, kOsPageSize - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  rounded &= ~(kOsPageSize - 1);
  return lazymalloc_aligned_alloc(kOsPageSize, rounded ? rounded : kOsPageSize);
}

LM_EXPORT size_t malloc_usable_size(void* p) { return lm_usable_size(p); }

LM_EXPORT int malloc_trim(size_t) { return lm_trim(); }

// glibc's parameters are accepted and ignored: lazymalloc has no arenas,
// mmap threshold or top pad to tune (its options are LAZYMALLOC_*).  glibc
// returns 1 for every parameter number, known or not; so do we.
LM_EXPORT int mallopt(int, int) { return 1; }

LM_EXPORT void malloc_stats(void) { lm_stats_print(false); }

LM_EXPORT int malloc_info(int options, FILE* fp) {
  if (options != 0) return EINVAL;
  if (!fp) return EINVAL;
  uint64_t m[5];
  lm_memory_state(m);
  fprintf(fp,
          "<malloc version=\"lazymalloc-" LAZYMALLOC_VERSION "\">\n"
          "<total type=\"reserved\" size=\"%llu\"/>\n"
          "<total type=\"active\" size=\"%llu\"/>\n"
          "<total type=\"retained\" size=\"%llu\"/>\n"
          "<total type=\"lazy\" size=\"%llu\"/>\n"
          "<total type=\"clean\" size=\"%llu\"/>\n"
          "</malloc>\n",
          (unsigned long long)m[0], (unsigned long long)m[1], (unsigned long long)m[2],
          (unsigned long long)m[3], (unsigned long long)m[4]);
  return 0;
}

namespace {
// From the held rows of one snapshot: in use is what the program was handed
// and has not freed (small objects, large and huge blocks), not the spans
// that hold them, whose free objects, like those in thread caches and the
// cached large blocks, are free to the program (a program that adds 1 MiB
// of live objects sees uordblks grow by about 1 MiB, even where they fill
// free space of spans already counted in active_bytes).  glibc's split: huge
// blocks, each its own mapping, in hblkhd, the rest in uordblks.
struct mallinfo2 fill_mallinfo2() {
  uint64_t held[kHeldCount], huge = 0;
  lm_held_state(held, &huge);
  auto row = [&](Held r) { return held[unsigned(r)]; };
  const uint64_t in_use = row(Held::small_in_use) + row(Held::large_blocks);
  if (huge > in_use) huge = in_use;
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  mi.hblkhd = huge;
  mi.uordblks = in_use - huge;
  mi.fordblks = row(Held::thread_caches) + row(Held::small_span_free) + row(Held::large_cached) +
                row(Held::retained) + row(Held::lazy);  // free but possibly resident
  mi.arena = mi.uordblks + mi.fordblks;  // memory touched for the heap, roughly
  mi.keepcost = row(Held::retained);
  return mi;
}
}  // namespace

LM_EXPORT struct mallinfo2 mallinfo2(void) { return fill_mallinfo2(); }

LM_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = fill_mallinfo2();
  struct mallinfo mi;
  memset(&mi, 0, sizeof mi);
  mi.arena = int(m2.arena);
  mi.hblkhd = int(m2.hblkhd);
  mi.uordblks = int(m2.uordblks);
  mi.fordblks = int(m2.fordblks);
  mi.keepcost = int(m2.keepcost);
  return mi;
}

// glibc-internal names some programs and libraries call directly.
LM_EXPORT void* __libc_malloc(size_t size) { return lm_malloc(size); }
LM_EXPORT void __libc_free(void* p) { lm_free(p); }
LM_EXPORT void* __libc_calloc(size_t count, size_t size) { return lm_calloc(count, size); }
LM_EXPORT void* __libc_realloc(void* p, size_t size) { return lm_realloc(p, size); }
LM_EXPORT void* __libc_memalign(size_t alignment, size_t size) {
  return lazymalloc_aligned_alloc(alignment, size);
}
LM_EXPORT void* __libc_valloc(size_t size) { return valloc(size); }
LM_EXPORT void* __libc_pvalloc(size_t size) { return pvalloc(size); }
LM_EXPORT int __posix_memalign(void** out, size_t alignment, size_t size) {
  return lazymalloc_posix_memalign(out, alignment, size);
}
