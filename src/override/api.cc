// The extended C API (include/lazymalloc/lazymalloc.h) and the allocator
// under its own prefixed names.  Linked into every flavour of the library.
#include <errno.h>
#include <string.h>

#include "core/bits.h"
#include "core/options.h"
#include "frontend/heap.h"
#include "lazymalloc/lazymalloc.h"
#include "pal/pal.h"

using namespace lazymalloc;

extern "C" {

LAZYMALLOC_API void* lazymalloc_malloc(size_t size) { return lm_malloc(size); }
LAZYMALLOC_API void* lazymalloc_calloc(size_t count, size_t size) { return lm_calloc(count, size); }
LAZYMALLOC_API void* lazymalloc_realloc(void* p, size_t size) { return lm_realloc(p, size); }
LAZYMALLOC_API void lazymalloc_free(void* p) { lm_free(p); }
LAZYMALLOC_API size_t lazymalloc_usable_size(const void* p) { return lm_usable_size(p); }

LAZYMALLOC_API void* lazymalloc_aligned_alloc(size_t alignment, size_t size) {
  // glibc 2.36 semantics (aligned_alloc is memalign): any alignment is
  // rounded up to a power of two; impossible ones fail with EINVAL.
  if (alignment <= kMinAlign) return lm_malloc(size);
  if (alignment > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_pow2(alignment)) alignment = size_t(1) << (log2_floor(alignment) + 1);
  return lm_aligned(size, alignment);
}

LAZYMALLOC_API int lazymalloc_posix_memalign(void** out, size_t alignment, size_t size) {
  if (alignment < sizeof(void*) || !is_pow2(alignment)) return EINVAL;
  int saved = errno;
  void* p = lm_aligned(size, alignment);
  errno = saved;
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

LAZYMALLOC_API const char* lazymalloc_version(void) { return LAZYMALLOC_VERSION; }

LAZYMALLOC_API void lazymalloc_stats_print(int json) { lm_stats_print(json != 0); }

LAZYMALLOC_API size_t lazymalloc_stats_write(char* buf, size_t len, int json) {
  return lm_stats_write(buf, len, json != 0);
}

LAZYMALLOC_API int lazymalloc_stat_get(const char* name, uint64_t* value) { return lm_stat_get(name, value); }

LAZYMALLOC_API int lazymalloc_option_get(const char* name, int64_t* value) {
  lm_init();
  unsigned o = name ? option_find(name) : kOptionCount;
  if (o == kOptionCount || !value) {
    errno = ENOENT;
    return -1;
  }
  *value = g_option_values[o].load(std::memory_order_relaxed);
  return 0;
}

LAZYMALLOC_API int lazymalloc_option_set(const char* name, int64_t value) {
  lm_init();
  unsigned o = name ? option_find(name) : kOptionCount;
  if (o == kOptionCount) {
    errno = ENOENT;
    return -1;
  }
  if (!option_set(o, value)) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

LAZYMALLOC_API size_t lazymalloc_purge(lazymalloc_purge_mode mode) {
  return lm_purge(mode == LAZYMALLOC_PURGE_NOW);
}

LAZYMALLOC_API void lazymalloc_thread_collect(void) { lm_thread_collect(); }

LAZYMALLOC_API int lazymalloc_limit_set(uint64_t soft, uint64_t hard) {
  if (!lm_set_limits(soft, hard)) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

LAZYMALLOC_API void lazymalloc_limit_get(uint64_t* soft, uint64_t* hard) {
  uint64_t s, h;
  lm_limits(&s, &h);
  if (soft) *soft = s;
  if (hard) *hard = h;
}

LAZYMALLOC_API size_t lazymalloc_pressure_notify(void) { return lm_pressure_notify(); }

LAZYMALLOC_API void lazymalloc_memory_state_get(lazymalloc_memory_state* out) {
  if (!out) return;
  uint64_t v[5];
  lm_memory_state(v);
  out->reserved = v[0];
  out->active = v[1];
  out->retained = v[2];
  out->lazy = v[3];
  out->clean = v[4];
}

LAZYMALLOC_API void* lazymalloc_discardable_alloc(size_t size) { return lm_discardable_alloc(size); }

LAZYMALLOC_API int lazymalloc_discardable_lock(void* p) { return lm_discardable_lock(p); }

LAZYMALLOC_API int lazymalloc_discardable_unlock(void* p) {
  if (LM_LIKELY(lm_discardable_unlock(p))) return 0;
  errno = EINVAL;
  return -1;
}

LAZYMALLOC_API int lazymalloc_discardable_free(void* p) {
  if (!p || lm_discardable_free(p)) return 0;
  errno = EINVAL;
  return -1;
}

LAZYMALLOC_API size_t lazymalloc_discardable_size(const void* p) { return lm_discardable_size(p); }

LAZYMALLOC_API size_t lazymalloc_discardable_purge(void) { return lm_discardable_purge(); }

}  // extern "C"

namespace {
// Statistics at exit (LAZYMALLOC_STATS=1|text|json).  A destructor of the
// library, so it also runs for programs that never call exit handlers of
// their own; it allocates nothing.  A program that never allocated has not
// read its options (lm_init did not run): LAZYMALLOC_STATS and
// LAZYMALLOC_STATS_PID are read here for it.  With stats_pid set, only the
// process with that pid reports (lazymalloc-run sets it to the program it
// starts, whose descendants inherit the variables).
__attribute__((destructor(101))) void print_stats_at_exit() {
  int64_t mode = option(Opt::stats);
  int64_t pid = option(Opt::stats_pid);
  if (!mode) {
    char** env = pal::environment();
    const char* stats = env_find(env, "LAZYMALLOC_STATS");
    if (!stats || !option_parse(unsigned(Opt::stats), stats, &mode)) mode = 0;
    const char* stats_pid = env_find(env, "LAZYMALLOC_STATS_PID");
    if (!stats_pid || !option_parse(unsigned(Opt::stats_pid), stats_pid, &pid)) pid = 0;
  }
  const Platform* p = lm_platform();
  if (!mode || (pid != 0 && pid != p->process_id(p->ctx))) return;
  lm_stats_at_exit(mode == 2);
}
}  // namespace
