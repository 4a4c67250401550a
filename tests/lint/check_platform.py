#!/usr/bin/env python3
"""The platform rule (docs/design.md, "Layers"): only src/pal/ makes system
calls, and code outside it reaches the operating system only through a
Platform (src/pal/pal.h), never through pal:: functions other than the
accessors and the process plumbing that pal.h lists.

    check_platform.py SRC_DIR
    check_platform.py --expect-marked FIXTURE_SRC_DIR

Prints every violation as FILE:LINE: WHY: TEXT and exits 1 if there is one
(2 if SRC_DIR is not a source tree).  Comments and string literals are
blanked first: they may name MADV_FREE, mmap(2) or "/proc/meminfo".
--expect-marked is the check's own test: on tests/lint/fixture/src it must
report exactly the lines that end in the comment "// expect".
"""
import pathlib
import re
import sys

# System calls and the libc wrappers that make them, called unqualified or
# as ::name( -- a member call (obj.name(, p->name() or a pal:: one is not.
CALLS = """syscall mmap mmap64 munmap mremap madvise process_madvise mprotect pkey_mprotect
mlock munlock brk sbrk futex membarrier getrandom getentropy clock_gettime gettimeofday time
nanosleep usleep sleep sched_getaffinity sched_setscheduler sched_yield sysconf get_nprocs
open open64 openat creat fopen read pread write pwrite close fcntl dup dup2 dup3 ioctl getpid
gettid kill raise abort prctl pidfd_open pthread_create pthread_atfork pthread_key_create
pthread_setspecific pthread_sigmask dlsym dlopen getenv secure_getenv""".split()
CALL_RE = re.compile(r"(?:^|(?<![\w.>:])|(?<![\w])::)(" + "|".join(CALLS) + r")\s*\(")
# Their constants and headers.
CONST_RE = re.compile(
    r"\b(?:SYS|FUTEX|MADV|PROT|MAP|MREMAP|MEMBARRIER|O|F|CLOCK|SCHED|RTLD|GRND)_[A-Z][A-Z0-9_]*\b")
INCLUDE_RE = re.compile(
    r"#\s*include\s*<(?:(?:unistd|fcntl|dlfcn|pthread|sched|signal|time)\.h|(?:sys|linux|asm)/)")
# pal:: names code outside pal/ may use (pal.h: the accessors, the plumbing).
ALLOWED = set("""linux_platform lock_platform set_lock_platform fatal get_errno set_errno
environment next_symbol loaded_symbol register_thread_exit set_thread_value
register_fork""".split())
PAL_RE = re.compile(r"(?<![\w])pal::(\w+)")
IMPORT_RE = re.compile(r"using\s+namespace\s+(?:lazymalloc::)?pal\b|namespace\s+\w+\s*=\s*(?:lazymalloc::)?pal\b")
TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)


def blank(text):
    """Comments and literals replaced by spaces (newlines kept: line numbers hold)."""
    return TOKENS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def check(src):
    problems = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".cc", ".h", ".c", ".cpp") or not path.is_file():
            continue
        if path.relative_to(src).parts[0] == "pal":
            continue
        raw = path.read_text(errors="replace").split("\n")
        code = blank(path.read_text(errors="replace")).split("\n")
        for n, (line, text) in enumerate(zip(code, raw), 1):
            why = []
            if INCLUDE_RE.search(text):
                why.append("system header outside src/pal")
            why += [f"system call {m.group(1)}() outside src/pal" for m in CALL_RE.finditer(line)]
            why += [f"system call constant {m.group(0)} outside src/pal" for m in CONST_RE.finditer(line)]
            why += [f"pal::{m.group(1)} bypasses the Platform" for m in PAL_RE.finditer(line)
                    if m.group(1) not in ALLOWED]
            if IMPORT_RE.search(line):
                why.append("pal imported (its calls would not be seen)")
            problems += [f"{path}:{n}: {w}: {text.strip()}" for w in why]
    return problems


def expect_marked(src):
    """0 if the lines reported are exactly those marked "// expect"."""
    reported = {tuple(p.split(":", 2)[:2]) for p in check(src)}
    marked = {(str(path), str(n)) for path in sorted(src.rglob("*.cc"))
              for n, line in enumerate(path.read_text().split("\n"), 1) if line.endswith("// expect")}
    for f, n in sorted(marked - reported):
        print(f"{f}:{n}: not reported, but marked // expect")
    for f, n in sorted(reported - marked):
        print(f"{f}:{n}: reported, but not marked // expect")
    if not marked:
        print(f"{src}: no line marked // expect")
    return 0 if marked and reported == marked else 1


def main():
    args = sys.argv[1:]
    mode_expect = args[:1] == ["--expect-marked"]
    if mode_expect:
        args = args[1:]
    if len(args) != 1 or not (pathlib.Path(args[0]) / "pal").is_dir():
        print("usage: check_platform.py [--expect-marked] SRC_DIR (with a pal/ directory)", file=sys.stderr)
        return 2
    if mode_expect:
        return expect_marked(pathlib.Path(args[0]))
    problems = check(pathlib.Path(args[0]))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} OS effect(s) outside the Platform (src/pal/pal.h)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
