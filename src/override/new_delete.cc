// C++ operator new and delete, every form.  The only file of the library
// compiled with exceptions: throwing operator new throws std::bad_alloc after
// giving the std::new_handler its chances, as the standard requires.
#include <cstddef>
#include <new>

#include "frontend/heap.h"

using namespace lazymalloc;

namespace {

void* new_impl(size_t size, size_t align) {
  for (;;) {
    void* p = align <= kMinAlign ? lm_malloc(size) : lm_aligned(size, align);
    if (p) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
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

LM_EXPORT void operator delete(void* p) noexcept { lm_free(p); }
LM_EXPORT void operator delete[](void* p) noexcept { lm_free(p); }
LM_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { lm_free(p); }
LM_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { lm_free(p); }
LM_EXPORT void operator delete(void* p, size_t) noexcept { lm_free(p); }
LM_EXPORT void operator delete[](void* p, size_t) noexcept { lm_free(p); }
LM_EXPORT void operator delete(void* p, std::align_val_t) noexcept { lm_free(p); }
LM_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { lm_free(p); }
LM_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { lm_free(p); }
LM_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { lm_free(p); }
LM_EXPORT void operator delete(void* p, size_t, std::align_val_t) noexcept { lm_free(p); }
LM_EXPORT void operator delete[](void* p, size_t, std::align_val_t) noexcept { lm_free(p); }
