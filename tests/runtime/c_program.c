/* A C program with lazymalloc (linked or preloaded): the C++ runtime
 * (libstdc++, libgcc_s, libm) must not be in its address space.  With an
 * argument, it then opens that C++ library in a local scope (dlopen
 * RTLD_LOCAL, as an interpreter opens an extension module) and runs its
 * lmt_cxx_check(): the library's operator new, lazymalloc's, must find that
 * runtime to call the new-handler and throw std::bad_alloc.  Exit status 0
 * when everything holds. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int maps_contain(const char* what) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) {
    perror("/proc/self/maps");
    exit(2);
  }
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, what)) found = 1;
  }
  fclose(f);
  return found;
}

int main(int argc, char** argv) {
  /* The allocator is in use: it is mapped and serves malloc. */
  volatile char* p = malloc(100);
  if (!p) return 2;
  p[0] = 1;
  free((void*)p);
  int failures = 0;
  if (!maps_contain("liblazymalloc")) {
    fprintf(stderr, "liblazymalloc is not mapped: the test does not test it\n");
    ++failures;
  }
  static const char* const kRuntime[] = {"libstdc++", "libgcc_s", "/libm.so", "/libm-"};
  for (size_t i = 0; i < sizeof kRuntime / sizeof kRuntime[0]; ++i) {
    if (maps_contain(kRuntime[i])) {
      fprintf(stderr, "%s is mapped into a C program\n", kRuntime[i]);
      ++failures;
    }
  }
  if (argc > 1) {
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
      return 2;
    }
    int (*check)(void) = (int (*)(void))dlsym(lib, "lmt_cxx_check");
    if (!check) {
      fprintf(stderr, "lmt_cxx_check: %s\n", dlerror());
      return 2;
    }
    failures += check();
  }
  if (failures) return 1;
  puts("ok");
  return 0;
}
