/* A preloadable library that does nothing but announce itself, so the
 * lazymalloc-run tests can check the wrapper's behaviour (LD_PRELOAD, exit
 * status, signals) independently of the allocator.  With
 * LAZYBENCH_DUMMY_ANNOUNCE=1 in the environment it writes a marker line to
 * stderr when it is loaded, proving that the preload took effect. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void lazybench_dummy_preload_loaded(void) {
  const char* announce = getenv("LAZYBENCH_DUMMY_ANNOUNCE");
  if (announce && strcmp(announce, "1") == 0) {
    static const char msg[] = "lazybench-dummy-preload: loaded\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
  }
}
