// lmt_cxx_check(): operator new, as this code's callers get it (lazymalloc's
// whether it is linked, preloaded, or reached from a library opened with
// dlopen), calls the new-handler and throws std::bad_alloc, and its nothrow
// forms return null after calling a handler that throws.  Returns the number
// of failures (reported on stderr).  Built as a library for c_program.c
// and, with LMT_CXX_MAIN, as a C++ program of its own.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <new>

namespace {

int g_calls = 0;
void ThrowingHandler() {
  ++g_calls;
  throw std::bad_alloc();
}

int Check(bool ok, const char* what) {
  if (ok) return 0;
  fprintf(stderr, "lmt_cxx_check: %s\n", what);
  return 1;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int lmt_cxx_check() {
  int failures = 0;
  // The operator new this code calls is lazymalloc's.
  void* (*plain_new)(size_t) = &::operator new;
  Dl_info info;
  failures += Check(dladdr(reinterpret_cast<void*>(plain_new), &info) && info.dli_fname &&
                        strstr(info.dli_fname, "liblazymalloc"),
                    "operator new is not lazymalloc's");
  volatile size_t huge = SIZE_MAX;  // never satisfiable, never folded
  bool caught = false;
  try {
    void* p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    caught = true;
  }
  failures += Check(caught, "operator new(SIZE_MAX) did not throw std::bad_alloc");

  g_calls = 0;
  caught = false;
  std::set_new_handler(ThrowingHandler);
  try {
    void* p = ::operator new[](huge, std::align_val_t{64});
    ::operator delete[](p, std::align_val_t{64});
  } catch (const std::bad_alloc&) {
    caught = true;
  }
  failures += Check(caught && g_calls == 1, "operator new[] aligned: the handler's exception did not come out");

  g_calls = 0;
  void* p = ::operator new(huge, std::nothrow);
  failures += Check(p == nullptr && g_calls == 1, "operator new nothrow: not null after one handler call");
  g_calls = 0;
  p = ::operator new[](huge, std::align_val_t{64}, std::nothrow);
  failures += Check(p == nullptr && g_calls == 1, "operator new[] aligned nothrow: not null after one handler call");
  std::set_new_handler(nullptr);
  p = ::operator new(huge, std::nothrow);
  failures += Check(p == nullptr, "operator new nothrow without a handler: not null");
  return failures;
}

#ifdef LMT_CXX_MAIN
int main() {
  int failures = lmt_cxx_check();
  if (failures == 0) puts("ok");
  return failures ? 1 : 0;
}
#endif
