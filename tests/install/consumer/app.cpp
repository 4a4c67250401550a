// A C++ program built against an installed lazymalloc (tests/install):
// operator new must be lazymalloc's.
#include <lazymalloc/lazymalloc.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

int main() {
  const std::size_t size = std::size_t(3) << 20;
  auto block = std::make_unique<char[]>(size);
  std::memset(block.get(), 1, size);
  std::uint64_t active = 0;
  if (lazymalloc_stat_get("active_bytes", &active) != 0 || active < size) {
    std::fprintf(stderr, "active_bytes %llu after new char[%zu]: operator new is not lazymalloc's\n",
                 static_cast<unsigned long long>(active), size);
    return 1;
  }
  if (std::strcmp(lazymalloc_version(), LAZYMALLOC_VERSION) != 0) return 1;
  std::printf("lazymalloc %s: C++ program ok (active_bytes %llu)\n", lazymalloc_version(),
              static_cast<unsigned long long>(active));
  return 0;
}
