// Sanitizer defaults for the test binaries (TSAN_OPTIONS / UBSAN_OPTIONS
// still override them); harmless unused functions in other builds.
// die_after_fork=0: a child of a multi-threaded fork may start threads (the
// allocator's background purger restarts lazily in the child), which TSan
// would otherwise answer by killing the child.
extern "C" const char* __tsan_default_options() { return "die_after_fork=0:halt_on_error=1"; }
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }
