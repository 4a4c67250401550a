// Every unit test leaves the options as it found them: many tests set an
// option (lazymalloc's options are process-wide) and not all of them put it
// back, so without this a test's outcome would depend on which tests ran
// before it in the same process (a plain run of the binary, `--gtest_shuffle`;
// ctest runs each test alone).
#include <gtest/gtest.h>

#include <atomic>

#include "core/options.h"
#include "frontend/heap.h"

namespace lazymalloc::test {
namespace {

class RestoreOptions : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    for (unsigned i = 0; i < kOptionCount; ++i) found_[i] = g_option_values[i].load();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    for (unsigned i = 0; i < kOptionCount; ++i) g_option_values[i].store(found_[i]);
    // The heaps of the test's threads, pooled when they exited, go to the
    // next threads with whatever the test left in them (cached objects,
    // spans parked or current): collected here, as a process that ran the
    // test alone would never see them, they keep only live objects' spans.
    lm_thread_collect();
    for (int pass = 0; pass < 2; ++pass) lm_collect_idle_heaps(~uint64_t(0) >> 1, 0);
  }

  int64_t found_[kOptionCount] = {};
};

// Appended before main (gtest_main) runs the tests; the listener list owns it.
// The process-wide allocator (lm_*) starts without its background thread, so
// that a test that runs alone (ctest) and one that runs after others find it
// alike: a thread one test started would outlive the test.  A test that wants
// the thread sets the option itself.
const bool registered = [] {
  option_set(unsigned(Opt::background), 0);
  ::testing::UnitTest::GetInstance()->listeners().Append(new RestoreOptions);
  return true;
}();

}  // namespace
}  // namespace lazymalloc::test
