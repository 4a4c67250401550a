// Misuse checks: the free-tag key and the failure paths that report a
// misuse and abort (checks.h has the tests themselves).
#include "frontend/checks.h"

#include "core/format.h"
#include "frontend/internal.h"
#include "pal/pal.h"

namespace lazymalloc {

namespace detail {

uintptr_t g_free_key = 1;  // drawn by lm_init (checks.h)
uint64_t g_link_key = 0;

[[noreturn]] LM_NOINLINE void corrupt_list(const void* b) {
  lm_invalid_pointer("malloc", b,
                     "corrupted free list (a freed object was overwritten: use after free or overflow)");
}

LM_FAILURE_PATH
Block* take_failed(const Block* b) { corrupt_list(b); }

LM_FAILURE_PATH
void check_above_limit(const char* fn, const Span* s, size_t i, void* p) {
  if (i >= __atomic_load_n(&s->reserved, __ATOMIC_RELAXED)) {
    // Below carved_max: handed out before the span started over
    // (span_restart_if_empty, spans.cc), when every object of it was free.
    if (i < __atomic_load_n(&s->carved_max, __ATOMIC_RELAXED)) {
      lm_invalid_pointer(fn, p, "double free (already freed)");
    }
    lm_invalid_pointer(fn, p, "not allocated (never handed out)");
  }
  // A dormant object is free: its tag may have gone with its page.
  if (span_dormant(s, i)) lm_invalid_pointer(fn, p, "double free (already freed)");
}

// The failure path of lm_free's small-object tests (a tail call): says what
// was wrong and aborts, or, for a live object at or above the span's
// check_limit (lowered while the span has dormant objects), completes the
// free as lm_free would have.
LM_FAILURE_PATH
void free_failed(void* p, Span* s) {
  check_live("free", s, object_index("free", s, p), p);
  set_free_tag(p);  // tagged before cached
  bin_push(s, p);
}

// Reports a pointer in no span.
LM_FAILURE_PATH
Span* unknown_pointer(const char* fn, const void* p) {
  lm_invalid_pointer(fn, p, g.backend.owns_address(p) ? "not allocated (double free?)"
                                                     : "not allocated by lazymalloc");
}

// lm_free's path for a pointer in no span (a tail call): free(NULL) does
// nothing, anything else is reported.
LM_FAILURE_PATH
void free_unknown(const void* p) {
  if (p) unknown_pointer("free", p);
}

}  // namespace detail

using namespace detail;

uintptr_t lm_free_tag(const void* p) { return free_tag(p); }

void lm_invalid_pointer(const char* fn, const void* p, const char* why) {
  char buf[256];
  Writer w(buf, sizeof buf);
  w.put("lazymalloc: ");
  w.put(fn);
  w.put("(): invalid pointer ");
  w.put_hex(reinterpret_cast<uintptr_t>(p));
  w.put(": ");
  w.put(why);
  w.put('\n');
  pal::fatal(buf, w.finish());
}

}  // namespace lazymalloc
