// C++ operator new and delete, every form.  The only file of the library
// compiled with exceptions: throwing operator new throws std::bad_alloc after
// giving the std::new_handler its chances, as the standard requires.
#include <cstddef>
#include <new>

#include "core/bits.h"
#include "frontend/heap.h"

using namespace lazymalloc;

namespace {

// The allocation, whose failure path (new_retry) is out of line, so that the
// fast path saves no registers for the handler loop.
inline void* new_alloc(size_t size, size_t align) {
  return align <= kMinAlign ? lm_malloc(size) : lm_aligned(size, align);
}

// After a failed allocation: calls the new_handler and tries again until one
// succeeds or there is no handler (std::bad_alloc).
LM_NOINLINE void* new_retry(size_t size, size_t align) {
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
    if (void* p = new_alloc(size, align)) return p;
  }
}

inline void* new_impl(size_t size, size_t align) {
  void* p = new_alloc(size, align);
  if (LM_LIKELY(p != nullptr)) return p;
  return new_retry(size, align);
}

void* new_nothrow(size_t size, size_t align) noexcept {
  try {
    return new_impl(size, align);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

#define LM_EXPORT __attribute__((visibility("default")))
// The delete forms take lm_free's fast path in their own body where the
// library is linked with LTO (src/CMakeLists.txt), as free does.
#define LM_DELETE LM_EXPORT __attribute__((flatten))

LM_EXPORT void* operator new(size_t size) { return new_impl(size, 0); }
LM_EXPORT void* operator new[](size_t size) { return new_impl(size, 0); }
LM_EXPORT void* operator new(size_t size, const std::nothrow_t&) noexcept { return new_nothrow(size, 0); }
LM_EXPORT void* operator new[](size_t size, const std::nothrow_t&) noexcept { return new_nothrow(size, 0); }
LM_EXPORT void* operator new(size_t size, std::align_val_t al) { return new_impl(size, size_t(al)); }
LM_EXPORT void* operator new[](size_t size, std::align_val_t al) { return new_impl(size, size_t(al)); }
LM_EXPORT void* operator new(size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  return new_nothrow(size, size_t(al));
}
LM_EXPORT void* operator new[](size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  return new_nothrow(size, size_t(al));
}

LM_DELETE void operator delete(void* p) noexcept { lm_free(p); }
LM_DELETE void operator delete[](void* p) noexcept { lm_free(p); }
LM_DELETE void operator delete(void* p, const std::nothrow_t&) noexcept { lm_free(p); }
LM_DELETE void operator delete[](void* p, const std::nothrow_t&) noexcept { lm_free(p); }
LM_DELETE void operator delete(void* p, size_t) noexcept { lm_free(p); }
LM_DELETE void operator delete[](void* p, size_t) noexcept { lm_free(p); }
LM_DELETE void operator delete(void* p, std::align_val_t) noexcept { lm_free(p); }
LM_DELETE void operator delete[](void* p, std::align_val_t) noexcept { lm_free(p); }
LM_DELETE void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { lm_free(p); }
LM_DELETE void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { lm_free(p); }
LM_DELETE void operator delete(void* p, size_t, std::align_val_t) noexcept { lm_free(p); }
LM_DELETE void operator delete[](void* p, size_t, std::align_val_t) noexcept { lm_free(p); }
