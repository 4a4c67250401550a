// C++ operator new and delete, every form.  Throwing operator new throws
// std::bad_alloc after giving the std::new_handler its chances, as the
// standard requires; the nothrow forms return null instead.
//
// liblazymalloc.so (LAZYMALLOC_CXX_RUNTIME_WEAK) does not depend on the C++
// runtime, so that a C program that loads it (linked or preloaded) does not
// load libstdc++, libm and libgcc_s with it.  A program that calls operator
// new has the runtime loaded already, and the library uses that one:
// - std::get_new_handler and std::__throw_bad_alloc through weak references,
//   which the dynamic linker binds at load time wherever libstdc++ is among
//   the program's libraries; failing that (a C++ library opened later with
//   dlopen) they are looked up in the loaded libstdc++ on a failure.
// - The nothrow forms, whose handler may throw, hand a failure on to the
//   runtime's own nothrow form, which calls the throwing form (ours) and
//   catches, as the standard's default behaviour says.  So this file has no
//   catch and is compiled without exceptions (with unwind tables, which the
//   handler's and the runtime's exceptions pass through).
// Without a C++ runtime that the library can find (libstdc++ linked
// statically into the program) the nothrow forms return null and the
// throwing forms abort with a message.  The static library uses the runtime
// directly (compiled with exceptions): a program linked with it links the
// runtime its operator new calls need.
#include <cstddef>
#include <new>

#include "core/bits.h"
#include "frontend/heap.h"
#include "pal/pal.h"

using namespace lazymalloc;

#if LAZYMALLOC_CXX_RUNTIME_WEAK
namespace std {
new_handler get_new_handler() noexcept __attribute__((weak));
[[noreturn]] void __throw_bad_alloc() __attribute__((weak));
}  // namespace std
#endif

namespace {

// The allocation, whose failure path (new_retry) is out of line, so that the
// fast path saves no registers for the handler loop.
inline void* new_alloc(size_t size, size_t align) {
  return align <= kMinAlign ? lm_malloc(size) : lm_aligned(size, align);
}

enum NothrowForm : unsigned { kNew, kNewArray, kNewAligned, kNewArrayAligned };

#if LAZYMALLOC_CXX_RUNTIME_WEAK
// A function of the C++ runtime: the definition after ours in the global
// lookup order (no allocation, so it works when memory has run out), or the
// one in a libstdc++ loaded in a local scope (a C program's dlopen of a C++
// library).
void* runtime_symbol(const char* name) {
  void* p = pal::next_symbol(name);
  return p ? p : pal::loaded_symbol("libstdc++.so.6", name);
}

// The C++ runtime's new-handler (null if none, or no runtime).
std::new_handler current_new_handler() {
  auto get = &std::get_new_handler;
  if (!get) get = reinterpret_cast<std::new_handler (*)() noexcept>(runtime_symbol("_ZSt15get_new_handlerv"));
  return get ? get() : nullptr;
}

[[noreturn]] void throw_bad_alloc() {
  auto thrower = &std::__throw_bad_alloc;
  if (!thrower) thrower = reinterpret_cast<void (*)()>(runtime_symbol("_ZSt17__throw_bad_allocv"));
  if (thrower) thrower();
  static const char kMsg[] =
      "lazymalloc: operator new: out of memory, and no C++ runtime found to throw std::bad_alloc\n";
  pal::fatal(kMsg, sizeof kMsg - 1);
}

// The nothrow forms, by their mangled names (runtime_symbol finds the
// runtime's definitions, not ours).
constexpr const char* kNothrowNames[] = {"_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
                                         "_ZnwmSt11align_val_tRKSt9nothrow_t",
                                         "_ZnamSt11align_val_tRKSt9nothrow_t"};
constexpr std::nothrow_t kNothrow{};  // std::nothrow is the runtime's

// A nothrow form's failure: null at once without a handler; with one, the
// runtime's nothrow form retries through our throwing form and catches
// what the handler throws.
LM_NOINLINE void* nothrow_retry(size_t size, size_t align, NothrowForm form) {
  if (!current_new_handler()) return nullptr;
  void* f = runtime_symbol(kNothrowNames[form]);
  if (!f) return nullptr;
  if (form == kNew || form == kNewArray) {
    return reinterpret_cast<void* (*)(size_t, const std::nothrow_t&) noexcept>(f)(size, kNothrow);
  }
  return reinterpret_cast<void* (*)(size_t, std::align_val_t, const std::nothrow_t&) noexcept>(f)(
      size, std::align_val_t(align), kNothrow);
}
#else
std::new_handler current_new_handler() { return std::get_new_handler(); }
[[noreturn]] void throw_bad_alloc() { throw std::bad_alloc(); }
#endif

// After a failed allocation: calls the new_handler and tries again until one
// succeeds or there is no handler (std::bad_alloc).
LM_NOINLINE void* new_retry(size_t size, size_t align) {
  for (;;) {
    std::new_handler handler = current_new_handler();
    if (!handler) throw_bad_alloc();
    handler();
    if (void* p = new_alloc(size, align)) return p;
  }
}

#if LAZYMALLOC_CXX_RUNTIME_WEAK
inline void* new_nothrow(size_t size, size_t align, NothrowForm form) noexcept {
  void* p = new_alloc(size, align);
  if (LM_LIKELY(p != nullptr)) return p;
  return nothrow_retry(size, align, form);
}
#else
void* new_nothrow(size_t size, size_t align, NothrowForm) noexcept {
  try {
    void* p = new_alloc(size, align);
    return p ? p : new_retry(size, align);
  } catch (...) {
    return nullptr;
  }
}
#endif

inline void* new_impl(size_t size, size_t align) {
  void* p = new_alloc(size, align);
  if (LM_LIKELY(p != nullptr)) return p;
  return new_retry(size, align);
}

}  // namespace

#define LM_EXPORT __attribute__((visibility("default")))
// The delete forms take lm_free's fast path in their own body where the
// library is linked with LTO (src/CMakeLists.txt), as free does.
#define LM_DELETE LM_EXPORT __attribute__((flatten))

LM_EXPORT void* operator new(size_t size) { return new_impl(size, 0); }
LM_EXPORT void* operator new[](size_t size) { return new_impl(size, 0); }
LM_EXPORT void* operator new(size_t size, const std::nothrow_t&) noexcept { return new_nothrow(size, 0, kNew); }
LM_EXPORT void* operator new[](size_t size, const std::nothrow_t&) noexcept {
  return new_nothrow(size, 0, kNewArray);
}
LM_EXPORT void* operator new(size_t size, std::align_val_t al) { return new_impl(size, size_t(al)); }
LM_EXPORT void* operator new[](size_t size, std::align_val_t al) { return new_impl(size, size_t(al)); }
LM_EXPORT void* operator new(size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  return new_nothrow(size, size_t(al), kNewAligned);
}
LM_EXPORT void* operator new[](size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  return new_nothrow(size, size_t(al), kNewArrayAligned);
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
