/* A program built against an installed lazymalloc (tests/install): its
 * malloc must be lazymalloc's, and the header's version the library's. */
#include <lazymalloc/lazymalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  const size_t size = (size_t)3 << 20;
  char* volatile p = malloc(size);
  if (!p) return 1;
  memset(p, 1, size);
  uint64_t active = 0;
  if (lazymalloc_stat_get("active_bytes", &active) != 0) {
    fprintf(stderr, "lazymalloc_stat_get failed\n");
    return 1;
  }
  if (active < size) {
    fprintf(stderr, "active_bytes %llu after a %zu-byte malloc: malloc is not lazymalloc's\n",
            (unsigned long long)active, size);
    return 1;
  }
  if (strcmp(lazymalloc_version(), LAZYMALLOC_VERSION) != 0) {
    fprintf(stderr, "library %s, header %s\n", lazymalloc_version(), LAZYMALLOC_VERSION);
    return 1;
  }
  free(p);
  printf("lazymalloc %s: C program ok (active_bytes %llu)\n", lazymalloc_version(), (unsigned long long)active);
  return 0;
}
