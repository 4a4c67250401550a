/*
 * lazymalloc — a Linux malloc whose centre is how and when memory goes back
 * to the kernel.
 *
 * The standard allocation API (malloc, free, calloc, realloc, reallocarray,
 * posix_memalign, aligned_alloc, memalign, valloc, pvalloc,
 * malloc_usable_size, malloc_trim, mallopt, malloc_stats, malloc_info and
 * every C++ operator new/delete) is provided under its usual names when
 * liblazymalloc.so is preloaded or when liblazymalloc.so / liblazymalloc.a is
 * linked.  This header declares the extended API only.
 *
 * All functions here are thread-safe and never allocate through the standard
 * library.
 */
#ifndef LAZYMALLOC_LAZYMALLOC_H
#define LAZYMALLOC_LAZYMALLOC_H

#include <stddef.h>
#include <stdint.h>

/* LAZYMALLOC_VERSION ("MAJOR.MINOR.PATCH") and LAZYMALLOC_VERSION_MAJOR,
 * _MINOR, _PATCH: the version this header belongs to. */
#include <lazymalloc/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LAZYMALLOC_API __attribute__((visibility("default")))
#else
#define LAZYMALLOC_API
#endif

/* The allocator under its own names.  They behave exactly like the standard
 * functions (errno included) and work whether or not the standard names are
 * overridden; the liblazymalloc_api.a library provides only these, for
 * programs that want lazymalloc beside another malloc (and for sanitizer
 * builds of the tests). */
LAZYMALLOC_API void* lazymalloc_malloc(size_t size);
LAZYMALLOC_API void* lazymalloc_calloc(size_t count, size_t size);
LAZYMALLOC_API void* lazymalloc_realloc(void* ptr, size_t size);
LAZYMALLOC_API void* lazymalloc_aligned_alloc(size_t alignment, size_t size);
LAZYMALLOC_API int lazymalloc_posix_memalign(void** out, size_t alignment, size_t size);
LAZYMALLOC_API void lazymalloc_free(void* ptr);
LAZYMALLOC_API size_t lazymalloc_usable_size(const void* ptr);

/* The version of the library actually loaded ("MAJOR.MINOR.PATCH"), which
 * may differ from LAZYMALLOC_VERSION, the header's. */
LAZYMALLOC_API const char* lazymalloc_version(void);

/* Print all statistics to stderr, as text (json == 0) or as one JSON object. */
LAZYMALLOC_API void lazymalloc_stats_print(int json);

/* Write all statistics as text (json == 0) or JSON into buf (at most len
 * bytes, always NUL-terminated when len > 0).  Returns the length the full
 * output needs, excluding the NUL, like snprintf. */
LAZYMALLOC_API size_t lazymalloc_stats_write(char* buf, size_t len, int json);

/* Read one statistic by its name (as printed in the text/JSON output; also
 * the rows of "held", such as small_in_use, where no statistic has the
 * name, and a size class's as "classes.SIZE.NAME", such as
 * "classes.1024.carved_bytes").  Returns 0 and stores the value, or -1
 * with errno = ENOENT. */
LAZYMALLOC_API int lazymalloc_stat_get(const char* name, uint64_t* value);

/* Read one option by its name (lower case, without the LAZYMALLOC_ prefix,
 * e.g. "decay_ms").  Returns 0 and stores the value, or -1 with
 * errno = ENOENT. */
LAZYMALLOC_API int lazymalloc_option_get(const char* name, int64_t* value);

/* Set a run-time adjustable option.  Returns 0, or -1 with errno = ENOENT
 * (unknown name) or EINVAL (value out of range). */
LAZYMALLOC_API int lazymalloc_option_set(const char* name, int64_t value);

/* How lazymalloc_purge() gives memory back. */
typedef enum lazymalloc_purge_mode {
  /* MADV_FREE: the kernel takes the pages only when it needs memory. */
  LAZYMALLOC_PURGE_LAZY = 0,
  /* MADV_DONTNEED: the pages leave the process now (Rss drops at once). */
  LAZYMALLOC_PURGE_NOW = 1
} lazymalloc_purge_mode;

/* Return the calling thread's cached free memory to the shared heap and
 * purge every free page run, whatever its age.  Returns the number of bytes
 * whose state changed. */
LAZYMALLOC_API size_t lazymalloc_purge(lazymalloc_purge_mode mode);

/* Memory limits in bytes (0 = none).  Soft: when memory the allocator holds
 * (in use + free but resident or lazily freed) exceeds it, free memory is
 * purged with MADV_DONTNEED, oldest first.  Hard: allocations that would
 * take the bytes in use beyond it fail with ENOMEM.  Same as the options
 * LAZYMALLOC_MEMORY_LIMIT and LAZYMALLOC_MEMORY_LIMIT_HARD.  Returns 0, or -1
 * with errno = EINVAL for values out of range. */
LAZYMALLOC_API int lazymalloc_limit_set(uint64_t soft, uint64_t hard);
LAZYMALLOC_API void lazymalloc_limit_get(uint64_t* soft, uint64_t* hard);

/* Report memory pressure, as a PSI event would: every free byte is purged
 * with MADV_DONTNEED at once, oldest first.  Returns the bytes purged. */
LAZYMALLOC_API size_t lazymalloc_pressure_notify(void);

/* Return the calling thread's cached free objects to the shared heap (as at
 * thread exit, but the thread keeps working). */
LAZYMALLOC_API void lazymalloc_thread_collect(void);

/* Bytes in each page state, a cheap snapshot (see docs/stats.md). */
typedef struct lazymalloc_memory_state {
  uint64_t reserved;   /* address space reserved */
  uint64_t active;     /* in page runs that hold live objects */
  uint64_t retained;   /* free, still resident, nothing told to the kernel */
  uint64_t lazy;       /* free, given to the kernel with MADV_FREE */
  uint64_t clean;      /* free, reads as zero: MADV_DONTNEED or never touched */
} lazymalloc_memory_state;

LAZYMALLOC_API void lazymalloc_memory_state_get(lazymalloc_memory_state* out);

/* Discardable memory (docs/discardable.md): blocks whose contents the
 * program can regenerate, which lazymalloc may drop while they are unlocked
 * -- under memory pressure (PSI, cgroup limits, lazymalloc_pressure_notify),
 * the soft limit, the discardable_limit option, lazymalloc_purge,
 * malloc_trim or lazymalloc_discardable_purge -- least recently unlocked
 * first, from the background thread where there is one.  A locked block is
 * never discarded.  Lock and unlock make no system call and take no lock.
 *
 * Discarded pages read as zero (MADV_DONTNEED).  Only if the kernel refused
 * the advice (mlocked memory) are a discarded block's contents undefined; it
 * is reported discarded all the same.
 *
 * Blocks are page-granular and page-aligned; they are not malloc memory:
 * free() and realloc() of one abort with a message.  After fork() the child
 * has the parent's blocks in the same states; each process discards its own
 * copy independently. */
typedef enum lazymalloc_discardable_state {
  /* The block was not discarded since it was last unlocked. */
  LAZYMALLOC_DISCARDABLE_INTACT = 0,
  /* The block was discarded: its contents are lost (zero, see above). */
  LAZYMALLOC_DISCARDABLE_DISCARDED = 1
} lazymalloc_discardable_state;

/* A new discardable block of at least `size` bytes, LOCKED, contents
 * undefined.  NULL with errno = ENOMEM when out of memory. */
LAZYMALLOC_API void* lazymalloc_discardable_alloc(size_t size);

/* Lock `ptr` (may be nested: a block locked n times needs n unlocks).
 * Returns LAZYMALLOC_DISCARDABLE_INTACT or LAZYMALLOC_DISCARDABLE_DISCARDED;
 * DISCARDED is returned to exactly one lock after each discard (nested locks
 * of a block that is already locked return INTACT).  -1 with errno = EINVAL
 * if `ptr` is not a discardable block, EOVERFLOW if locked 2^32-1 times. */
LAZYMALLOC_API int lazymalloc_discardable_lock(void* ptr);

/* Undo one lock; when none is left, the block may be discarded.  Returns 0,
 * or -1 with errno = EINVAL if `ptr` is not a discardable block or is not
 * locked. */
LAZYMALLOC_API int lazymalloc_discardable_unlock(void* ptr);

/* Free a block in any state.  Returns 0 (also for NULL), or -1 with
 * errno = EINVAL if `ptr` is not a discardable block. */
LAZYMALLOC_API int lazymalloc_discardable_free(void* ptr);

/* Usable bytes of the block (its size rounded up to whole pages), or 0 if
 * `ptr` is not a discardable block. */
LAZYMALLOC_API size_t lazymalloc_discardable_size(const void* ptr);

/* Discard every unlocked block now, on the calling thread.  Returns the
 * bytes discarded. */
LAZYMALLOC_API size_t lazymalloc_discardable_purge(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LAZYMALLOC_LAZYMALLOC_H */
