// A small program's footprint (issue #16): spans of the big classes hold
// about 128 KiB (or one object), not 8 objects, so that they fit in the
// holes other spans leave in the 2 MiB slots; and their current span stays
// while a thread churns one object.  Through the lm_* entry
// points of this process (its own malloc stays glibc's).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "frontend/heap.h"
#include "frontend/internal.h"
#include "frontend/size_class.h"

namespace lazymalloc {
namespace {

// A thread's objects of 224 KiB come one to a span of 256 KiB (was 8 to a
// span of 1.75 MiB); of 16 KiB, 8 to a span of 128 KiB as before; and a
// 40 KiB span holds three.
TEST(SpanSize, ABigObjectsSpanIsAboutItsSize) {
  std::thread([] {
    struct Case {
      size_t size, span_bytes;
    };
    for (Case k : {Case{224 << 10, 4 * kUnitSize}, Case{16 << 10, 2 * kUnitSize}, Case{40 << 10, 2 * kUnitSize}}) {
      std::vector<void*> live;
      for (int i = 0; i < 4; ++i) {
        void* p = lm_malloc(k.size);
        ASSERT_NE(p, nullptr);
        const Span* s = detail::g.backend.span_of(p);
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->kind, SpanKind::kSmall);
        EXPECT_EQ(s->bytes, k.span_bytes) << k.size;
        live.push_back(p);
      }
      for (void* p : live) lm_free(p);
    }
  }).join();
}

// A big class's current span keeps a phantom object: a thread that mallocs
// and frees one 224 KiB object over and over reuses its span, with no
// backend allocation or release per pair.
TEST(SpanSize, OneBigObjectChurnedKeepsItsSpan) {
  std::thread([] {
    const size_t size = 224 << 10;
    lm_free(lm_malloc(size));
    Heap* h = detail::tl_heap;
    auto acquired = [h] { return h->stats.v[unsigned(HeapStat::spans_acquired)].load(); };
    void* first = lm_malloc(size);
    const Span* s = detail::g.backend.span_of(first);
    lm_free(first);
    const uint64_t before = acquired();
    for (int i = 0; i < 100; ++i) {
      void* p = lm_malloc(size);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(detail::g.backend.span_of(p), s);
      lm_free(p);
    }
    EXPECT_EQ(acquired(), before);
  }).join();
}

}  // namespace
}  // namespace lazymalloc
