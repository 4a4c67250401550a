// The allocation functions the stress tests call.  With LMT_PREFIXED the
// tests drive lazymalloc through its prefixed API (lazymalloc_api, for
// sanitizer builds where the sanitizer owns malloc); otherwise they call the
// standard names, which the linked library overrides.
#ifndef LAZYMALLOC_TESTS_COMMON_ALLOC_SHIM_H
#define LAZYMALLOC_TESTS_COMMON_ALLOC_SHIM_H

#include <malloc.h>
#include <stdlib.h>

#include "test_util.h"

namespace lmt {

#if defined(LMT_PREFIXED)
#if !LMT_HAVE_LAZYMALLOC
#error "LMT_PREFIXED needs the lazymalloc API"
#endif
inline constexpr bool kPrefixed = true;
inline void* Malloc(size_t n) { return lazymalloc_malloc(n); }
inline void* Calloc(size_t c, size_t n) { return lazymalloc_calloc(c, n); }
inline void* Realloc(void* p, size_t n) { return lazymalloc_realloc(p, n); }
inline void* AlignedAlloc(size_t a, size_t n) { return lazymalloc_aligned_alloc(a, n); }
inline int PosixMemalign(void** out, size_t a, size_t n) { return lazymalloc_posix_memalign(out, a, n); }
inline void Free(void* p) { lazymalloc_free(p); }
inline size_t UsableSize(void* p) { return lazymalloc_usable_size(p); }
#else
inline constexpr bool kPrefixed = false;
inline void* Malloc(size_t n) { return malloc(n); }
inline void* Calloc(size_t c, size_t n) { return calloc(c, n); }
inline void* Realloc(void* p, size_t n) { return realloc(p, n); }
inline void* AlignedAlloc(size_t a, size_t n) { return aligned_alloc(a, n); }
inline int PosixMemalign(void** out, size_t a, size_t n) { return posix_memalign(out, a, n); }
inline void Free(void* p) { free(p); }
inline size_t UsableSize(void* p) { return malloc_usable_size(p); }
#endif

}  // namespace lmt

#endif  // LAZYMALLOC_TESTS_COMMON_ALLOC_SHIM_H
