// libFuzzer target for lazymalloc's allocation API.
//
// The input is a program: each operation starts with an opcode byte followed
// by its operands (slot, size, alignment, ...).  Operations act on a table of
// up to 256 live slots.  A shadow model records, for every live block, its
// requested size and the seed of its fill pattern (derived from the slot id
// and a per-slot generation); before a block is freed or reallocated the
// whole block is verified byte for byte, after realloc the preserved prefix
// is verified, calloc memory must read as zero, alignments and
// usable_size >= requested are checked.  Any mismatch aborts with a message.
//
// The allocator is linked through lazymalloc_api (prefixed names only), so
// libFuzzer and ASan keep their own malloc.  A second thread frees blocks
// handed to it through a queue (remote frees), or allocates blocks that the
// fuzzing thread then owns (frees in the other direction).
//
// Input format (all reads past the end yield 0, so every input is valid):
//   op = byte % kOpCount, then per op:
//   MALLOC/CALLOC/ALIGNED/MEMALIGN/REMOTE_ALLOC: slot, size (see ReadSize)
//   CALLOC additionally: a count byte (1..8); ALIGNED/MEMALIGN: log2 alignment
//   REALLOC: slot, size;  FREE/REMOTE_FREE/USABLE: slot
//   PURGE: mode byte;  OPTION: option byte, value byte;  others: nothing
#include <lazymalloc/lazymalloc.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;
constexpr size_t kSlots = 256;
constexpr size_t kMaxSize = 8 * MiB;
// Bounds per input, so one input cannot take seconds or gigabytes.
constexpr size_t kMaxLiveBytes = 192 * MiB;
constexpr size_t kMaxTouchedBytes = 256 * MiB;  // fill + verify traffic
constexpr size_t kMaxOps = 4096;

[[noreturn]] void Fail(const char* what, const void* p, size_t a, size_t b) {
  std::fprintf(stderr, "fuzz_malloc: FAILURE: %s (ptr=%p, a=%zu, b=%zu)\n", what, p, a, b);
  std::fflush(stderr);
  std::abort();
}

uint64_t Mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

uint64_t SeedOf(size_t slot, uint64_t gen) { return Mix64((uint64_t(slot) << 40) ^ gen ^ 0x5eed) | 1; }

// Pattern word k of a block with this seed; bytes are taken little-endian.
inline uint64_t PatternWord(uint64_t seed, size_t k) { return seed ^ (uint64_t(k) * 0x9E3779B97F4A7C15ULL); }

void Fill(void* p, size_t n, uint64_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  size_t words = n / 8;
  for (size_t k = 0; k < words; ++k) {
    uint64_t w = PatternWord(seed, k);
    std::memcpy(b + 8 * k, &w, 8);
  }
  if (n % 8) {
    uint64_t w = PatternWord(seed, words);
    std::memcpy(b + 8 * words, &w, n % 8);
  }
}

// Returns the offset of the first mismatching byte, or n.
size_t Check(const void* p, size_t n, uint64_t seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  size_t words = n / 8;
  for (size_t k = 0; k < words; ++k) {
    uint64_t w = PatternWord(seed, k), got;
    std::memcpy(&got, b + 8 * k, 8);
    if (got != w) {
      for (size_t i = 0; i < 8; ++i)
        if (((got >> (8 * i)) & 0xff) != ((w >> (8 * i)) & 0xff)) return 8 * k + i;
    }
  }
  if (n % 8) {
    uint64_t w = PatternWord(seed, words);
    for (size_t i = 0; i < n % 8; ++i)
      if (b[8 * words + i] != static_cast<unsigned char>(w >> (8 * i))) return 8 * words + i;
  }
  return n;
}

size_t FindNonZero(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i]) return i;
  return n;
}

struct Reader {
  const uint8_t* d;
  size_t n, i = 0;
  bool done() const { return i >= n; }
  uint8_t u8() { return i < n ? d[i++] : 0; }
  uint32_t u16() { return u8() | (uint32_t(u8()) << 8); }
  uint32_t u24() { return u16() | (uint32_t(u8()) << 16); }
};

// Sizes 0 B .. 8 MiB: a selector byte picks a size class, then a few bytes
// give the exact size.  Mostly small, sometimes large and huge, and sizes
// next to the allocator's boundaries.
size_t ReadSize(Reader& r) {
  uint8_t sel = r.u8();
  if (sel < 128) return r.u8();                                // 0..255: tiny
  if (sel < 176) return r.u16() % (4 * KiB + 1);               // up to 4 KiB
  if (sel < 208) return r.u24() % (64 * KiB + 1);              // up to 64 KiB
  if (sel < 224) return r.u24() % (288 * KiB + 1);             // small/large edge (256 KiB)
  if (sel < 236) return 256 * KiB + r.u24() % (1 * MiB);       // large
  if (sel < 244) {                                             // huge
    return 1 * MiB + r.u24() % (kMaxSize - 1 * MiB + 1);
  }
  // Edges: a boundary +/- a small delta.
  static constexpr size_t kEdges[] = {0,        16,       128,     1 * KiB,  16 * KiB,
                                      64 * KiB, 256 * KiB, 1 * MiB, 2 * MiB, 4 * MiB,
                                      kMaxSize, 32 * KiB, 512 * KiB};
  size_t e = kEdges[r.u8() % (sizeof(kEdges) / sizeof(kEdges[0]))];
  int delta = static_cast<int>(r.u8() % 33) - 16;
  long long s = static_cast<long long>(e) + delta;
  if (s < 0) s = 0;
  if (s > static_cast<long long>(kMaxSize)) s = kMaxSize;
  return static_cast<size_t>(s);
}

struct Block {
  void* p = nullptr;
  size_t size = 0;
  uint64_t seed = 0;
};

// ---- the second thread: frees blocks it is handed, allocates on request ----
struct Job {
  enum Kind { kFree, kAlloc } kind;
  Block b;
  size_t size;  // kAlloc
};

class Remote {
 public:
  Remote() : t_([this] { Loop(); }) {}
  // Never joined: the process exits with the worker blocked on its queue.
  ~Remote() { t_.detach(); }

  void Free(const Block& b) {
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back(Job{Job::kFree, b, 0});
    ++pending_;
    cv_.notify_all();
  }

  // Synchronous: the worker allocates and fills the block.
  Block Alloc(size_t size, uint64_t seed) {
    std::unique_lock<std::mutex> g(mu_);
    Block b;
    b.seed = seed;
    q_.push_back(Job{Job::kAlloc, b, size});
    ++pending_;
    cv_.notify_all();
    done_cv_.wait(g, [&] { return pending_ == 0; });
    return alloc_result_;
  }

  void Drain() {
    std::unique_lock<std::mutex> g(mu_);
    done_cv_.wait(g, [&] { return pending_ == 0; });
  }

 private:
  void Loop() {
    for (;;) {
      Job j;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return !q_.empty(); });
        j = q_.front();
        q_.pop_front();
      }
      if (j.kind == Job::kFree) {
        size_t bad = Check(j.b.p, j.b.size, j.b.seed);
        if (bad != j.b.size) Fail("remote free: block corrupted before free", j.b.p, j.b.size, bad);
        lazymalloc_free(j.b.p);
      } else {
        Block b;
        b.p = lazymalloc_malloc(j.size);
        if (!b.p) Fail("remote malloc returned NULL", nullptr, j.size, 0);
        if (reinterpret_cast<uintptr_t>(b.p) % 16) Fail("remote malloc misaligned", b.p, j.size, 16);
        b.size = j.size;
        b.seed = j.b.seed;
        Fill(b.p, b.size, b.seed);
        std::lock_guard<std::mutex> g(mu_);
        alloc_result_ = b;
      }
      std::lock_guard<std::mutex> g(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Job> q_;
  size_t pending_ = 0;
  Block alloc_result_;
  std::thread t_;
};

Remote& TheRemote() {
  static Remote* r = new Remote();  // leaked on purpose: lives until exit
  return *r;
}

enum Op : uint8_t {
  kMalloc,
  kMalloc2,
  kMalloc3,
  kCalloc,
  kRealloc,
  kRealloc2,
  kFree,
  kFree2,
  kAligned,
  kMemalign,
  kUsable,
  kRemoteFree,
  kRemoteAlloc,
  kPurge,
  kPressure,
  kCollect,
  kOption,
  kBadRequest,
  kOpCount
};

struct State {
  Block slots[kSlots];
  uint64_t gen[kSlots] = {};
  size_t live = 0;     // requested bytes live
  size_t touched = 0;  // bytes filled or verified
  uint64_t next_gen = 1;

  uint64_t NewSeed(size_t s) { return SeedOf(s, (gen[s] += 1) ^ (next_gen++ << 20)); }

  // Budget: shrink requests that would exceed the live/traffic bounds.
  size_t Budget(size_t want) {
    if (live + want > kMaxLiveBytes || touched + 2 * want > kMaxTouchedBytes) return want % 256;
    return want;
  }

  void Verify(size_t s, const char* what) {
    Block& b = slots[s];
    touched += b.size;
    size_t bad = Check(b.p, b.size, b.seed);
    if (bad != b.size) Fail(what, b.p, b.size, bad);
    size_t us = lazymalloc_usable_size(b.p);
    if (us < b.size) Fail("usable_size < requested size", b.p, b.size, us);
  }

  void Release(size_t s) {  // verify and free the block in slot s
    if (!slots[s].p) return;
    Verify(s, "block corrupted before free");
    lazymalloc_free(slots[s].p);
    live -= slots[s].size;
    slots[s] = Block{};
  }

  void Install(size_t s, void* p, size_t size, size_t align, bool zeroed) {
    if (!p) Fail("allocation returned NULL", nullptr, size, align);
    if (reinterpret_cast<uintptr_t>(p) % align) Fail("misaligned block", p, size, align);
    size_t us = lazymalloc_usable_size(p);
    if (us < size) Fail("usable_size < requested size", p, size, us);
    if (zeroed) {
      touched += size;
      size_t nz = FindNonZero(p, size);
      if (nz != size) Fail("calloc memory not zero", p, size, nz);
    }
    Block& b = slots[s];
    b.p = p;
    b.size = size;
    b.seed = NewSeed(s);
    touched += size;
    Fill(p, size, b.seed);
    live += size;
  }
};

void ResetOptions() {
  // Short decay times so the background purger works on the fuzzer's memory
  // (purging live memory would show as a pattern mismatch).
  lazymalloc_option_set("purge", 0);  // adaptive
  lazymalloc_option_set("decay_ms", 2);
  lazymalloc_option_set("partial_decay_ms", 5);
  lazymalloc_limit_set(0, 0);
}

void Run(const uint8_t* data, size_t size) {
  static State st;  // static: large, and reused (emptied at the end of each run)
  Reader r{data, size};
  ResetOptions();
  size_t ops = 0;
  while (!r.done() && ops++ < kMaxOps) {
    uint8_t op = r.u8() % kOpCount;
    switch (op) {
      case kMalloc:
      case kMalloc2:
      case kMalloc3: {
        size_t s = r.u8();
        size_t n = st.Budget(ReadSize(r));
        st.Release(s);
        errno = 0;
        void* p = lazymalloc_malloc(n);
        st.Install(s, p, n, alignof(max_align_t), false);
        break;
      }
      case kCalloc: {
        size_t s = r.u8();
        size_t count = 1 + r.u8() % 8;
        size_t n = ReadSize(r) / count;
        n = st.Budget(n * count) / count;
        st.Release(s);
        void* p = lazymalloc_calloc(count, n);
        st.Install(s, p, count * n, alignof(max_align_t), true);
        break;
      }
      case kRealloc:
      case kRealloc2: {
        size_t s = r.u8();
        size_t n = ReadSize(r);
        Block& b = st.slots[s];
        if (!b.p) {  // realloc(NULL, n) is malloc(n)
          n = st.Budget(n);
          void* p = lazymalloc_realloc(nullptr, n);
          st.Install(s, p, n, alignof(max_align_t), false);
          break;
        }
        if (n > b.size) n = b.size + st.Budget(n - b.size);
        st.Verify(s, "block corrupted before realloc");
        Block old = b;
        void* p = lazymalloc_realloc(b.p, n);
        if (n == 0 && p == nullptr) {  // glibc: realloc(p, 0) frees p
          st.live -= old.size;
          b = Block{};
          break;
        }
        if (!p) Fail("realloc returned NULL", old.p, old.size, n);
        if (reinterpret_cast<uintptr_t>(p) % alignof(max_align_t)) Fail("realloc misaligned", p, n, 16);
        size_t keep = old.size < n ? old.size : n;
        st.touched += keep;
        size_t bad = Check(p, keep, old.seed);
        if (bad != keep) Fail("realloc did not preserve the prefix", p, keep, bad);
        size_t us = lazymalloc_usable_size(p);
        if (us < n) Fail("usable_size < requested size after realloc", p, n, us);
        st.live -= old.size;
        b = Block{};
        // The block keeps its prefix; refill all of it with a fresh pattern.
        b.p = p;
        b.size = n;
        b.seed = st.NewSeed(s);
        st.touched += n;
        Fill(p, n, b.seed);
        st.live += n;
        break;
      }
      case kFree:
      case kFree2: {
        size_t s = r.u8();
        if (st.slots[s].p) {
          st.Release(s);
        } else {
          lazymalloc_free(nullptr);  // free(NULL) is a no-op
        }
        break;
      }
      case kAligned:
      case kMemalign: {
        size_t s = r.u8();
        unsigned lg = r.u8() % 21;  // 1 B .. 1 MiB
        size_t n = st.Budget(ReadSize(r));
        size_t align = size_t(1) << lg;
        st.Release(s);
        void* p = nullptr;
        if (op == kAligned) {
          p = lazymalloc_aligned_alloc(align, n);
        } else {
          if (align < sizeof(void*)) align = sizeof(void*);
          int rc = lazymalloc_posix_memalign(&p, align, n);
          if (rc != 0) Fail("posix_memalign failed", nullptr, align, n);
        }
        st.Install(s, p, n, align, false);
        break;
      }
      case kUsable: {
        size_t s = r.u8();
        if (st.slots[s].p) st.Verify(s, "block corrupted (usable_size check)");
        break;
      }
      case kRemoteFree: {
        size_t s = r.u8();
        Block& b = st.slots[s];
        if (!b.p) break;
        st.Verify(s, "block corrupted before remote free");
        st.touched += b.size;
        st.live -= b.size;
        TheRemote().Free(b);
        b = Block{};
        break;
      }
      case kRemoteAlloc: {
        size_t s = r.u8();
        size_t n = st.Budget(ReadSize(r));
        st.Release(s);
        st.touched += n;
        Block b = TheRemote().Alloc(n, st.NewSeed(s));
        if (lazymalloc_usable_size(b.p) < n) Fail("usable_size < requested (remote block)", b.p, n, 0);
        st.slots[s] = b;
        st.live += n;
        break;
      }
      case kPurge:
        lazymalloc_purge((r.u8() & 1) ? LAZYMALLOC_PURGE_NOW : LAZYMALLOC_PURGE_LAZY);
        break;
      case kPressure:
        lazymalloc_pressure_notify();
        break;
      case kCollect:
        lazymalloc_thread_collect();
        break;
      case kOption: {
        uint8_t which = r.u8() % 4, v = r.u8();
        switch (which) {
          case 0: lazymalloc_option_set("purge", v % 4); break;  // adaptive/decay/eager/never
          case 1: lazymalloc_option_set("decay_ms", v % 8); break;
          case 2: lazymalloc_option_set("partial_decay_ms", v % 8); break;
          case 3: lazymalloc_limit_set(uint64_t(1 + v % 64) * MiB, 0); break;  // soft limit only
        }
        break;
      }
      case kBadRequest: {
        // Impossible requests must fail cleanly, glibc-style.
        uint8_t which = r.u8() % 4;
        errno = 0;
        if (which == 0) {
          void* p = lazymalloc_malloc(SIZE_MAX - r.u8());
          if (p || errno != ENOMEM) Fail("malloc(huge) did not fail with ENOMEM", p, errno, 0);
        } else if (which == 1) {
          void* p = lazymalloc_calloc(SIZE_MAX / 2 + 1 + r.u8(), 2);
          if (p || errno != ENOMEM) Fail("calloc overflow did not fail with ENOMEM", p, errno, 0);
        } else if (which == 2) {
          void* p = reinterpret_cast<void*>(0x1);
          size_t align = 24 + 8 * (r.u8() % 4) * 2;  // 24, 40, 56, 72: not powers of two
          int rc = lazymalloc_posix_memalign(&p, align, 64);
          if (rc != EINVAL) Fail("posix_memalign(bad alignment) did not return EINVAL", p, align, rc);
        } else {
          size_t s = r.u8();
          if (st.slots[s].p) {  // realloc to an impossible size: NULL, block untouched
            void* p = lazymalloc_realloc(st.slots[s].p, SIZE_MAX - 4096);
            if (p || errno != ENOMEM) Fail("realloc(huge) did not fail with ENOMEM", p, errno, 0);
            st.Verify(s, "block changed by a failed realloc");
          }
        }
        break;
      }
      default:
        break;
    }
  }
  // End of input: free everything (verified), wait for remote frees.
  for (size_t s = 0; s < kSlots; ++s) st.Release(s);
  TheRemote().Drain();
  if (st.live != 0) Fail("shadow model out of balance", nullptr, st.live, 0);
  st.touched = 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ResetOptions();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Run(data, size);
  return 0;
}
