#!/usr/bin/env bash
# Runs real programs' own test suites with and without lazymalloc preloaded
# and compares them test by test: CPython's regression tests (Debian's
# libpython3.11-testsuite, run by the system /usr/bin/python3.11), and
# GLib's own test suite (Debian's libglib2.0-tests, 287 installed tests run
# by gnome-desktop-testing-runner).
#
# Usage: tools/run-suites.sh [test_name ...]    (default: the list below)
#   SUITES             which suites (default: "python glib")
#   SUITES_BUILD_DIR   build tree (default: build); the library is
#                      $SUITES_BUILD_DIR/liblazymalloc.so
#   SUITES_JOBS        regrtest -j (default 2)
#   SUITES_PYTHONMALLOC  PYTHONMALLOC for both runs (default: malloc, so every
#                      Python object goes through malloc rather than pymalloc's
#                      arenas; set it empty for Python's default)
#   SUITES_OUT         where logs go (default: $SUITES_BUILD_DIR/suites)
# Exit status: 1 if any test passes without preload and fails with it (after
# one serial re-run with preload, to tell a flaky test from a regression),
# 2 if the setup fails, else 0.
#
# sqlite3's and git's own suites are not run: Debian ships neither (they need
# the source trees: sqlite's TCL testfixture, git's t/ directory; no
# deb-src here either), and
# Debian's libpython3.11-testsuite lacks test_sqlite3.  --timeout 300 bounds
# a hung test (regrtest kills it and reports it failed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${SUITES_BUILD_DIR:-build}
jobs=${SUITES_JOBS:-2}
pymalloc=${SUITES_PYTHONMALLOC-malloc}
suites=${SUITES:-python glib}
out=${SUITES_OUT:-$build/suites}
py=/usr/bin/python3.11

# Allocation-heavy tests that finish in a few minutes on 2 cores (measured:
# see docs/reliability.md).
default_tests=(
  test_dict test_list test_tuple test_set test_unicode test_string test_bytes
  test_memoryview test_json test_pickle test_marshal test_copy test_re
  test_collections test_ordered_dict test_array test_deque test_heapq test_bisect
  test_sort test_gc test_weakref test_itertools test_struct test_long test_decimal
  test_threading test_subprocess test_mmap test_bigmem test_zlib test_bz2
  test_lzma test_hashlib test_ctypes test_xml_etree test_csv
  test_email test_zipfile test_io
)
if (($# > 0)); then tests=("$@"); else tests=("${default_tests[@]}"); fi

# ---- the library ----
lib="$build/liblazymalloc.so"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target lazymalloc >/dev/null
[[ -f "$lib" ]] || { echo "run-suites: $lib was not built" >&2; exit 2; }
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")

mkdir -p "$out"
out=$(cd "$out" && pwd)
status=0

# ---- GLib's test suite ----
# Each runner's own log names every test PASS, FAIL or SKIP; a test that
# passes plain and fails preloaded is re-run once alone (flaky or not).
glib_run() {  # name, extra env...
  local name=$1 t0
  shift
  t0=$(date +%s)
  rm -rf "$out/glib-$name"
  (cd "$out" && env "$@" timeout 1800 gnome-desktop-testing-runner --parallel="$jobs" --timeout=300 \
     --log-directory="$out/glib-$name" glib) >"$out/glib-$name.log" 2>&1 || true
  echo "run-suites: glib $name: $(grep -c '^PASS' "$out/glib-$name.log") passed," \
    "$(grep -c '^FAIL' "$out/glib-$name.log") failed in $(( $(date +%s) - t0 )) s (log $out/glib-$name.log)"
}
glib_suite() {
  tools/deps.sh --require libglib2.0-tests gnome-desktop-testing || return 2
  echo "run-suites: GLib $(dpkg-query -W -f='${Version}' libglib2.0-tests) installed tests, -p$jobs"
  glib_run glibc
  glib_run lazymalloc LD_PRELOAD="$lib"
  # As root, fileutils.test's g_mkdir_with_parents("/usr/b/c", 0) succeeds
  # (it expects EACCES, so it fails in both runs) and leaves the directories.
  if [[ $(id -u) -eq 0 ]]; then rmdir /usr/b/c /usr/b 2>/dev/null || true; fi
  local regress=() flaky=() t
  # A test's last verdict wins (the runner prints failures again at the end).
  for t in $(awk '$1 == "PASS:" {print $2}' "$out/glib-glibc.log" | sort -u); do
    grep -q "^PASS: $t\$" "$out/glib-lazymalloc.log" && continue
    if (cd "$out" && LD_PRELOAD="$lib" gnome-desktop-testing-runner --timeout=300 "$t" >/dev/null 2>&1); then
      flaky+=("$t")
    else
      regress+=("$t")
    fi
  done
  echo "run-suites: glib without preload: $(grep -E '^(FAIL|SKIP):' "$out/glib-glibc.log" | sort -u | tr '\n' ' ')"
  echo "run-suites: glib with preload:    $(grep -E '^(FAIL|SKIP):' "$out/glib-lazymalloc.log" | sort -u | tr '\n' ' ')"
  ((${#flaky[@]})) && echo "run-suites: glib flaky under preload (passed alone): ${flaky[*]}"
  if ((${#regress[@]})); then
    echo "run-suites: glib REGRESSIONS (pass without lazymalloc, fail with it): ${regress[*]}"
    return 1
  fi
  echo "run-suites: glib: no regressions"
}

# ---- CPython's test suite ----
python_suite() {
tools/deps.sh --require python3.11 libpython3.11-testsuite || return 2
[[ -x $py ]] || { echo "run-suites: $py missing" >&2; return 2; }

# Is lazymalloc really the malloc of a preloaded python3.11?
ver=$(LD_PRELOAD=$lib $py -c 'import ctypes
f = ctypes.CDLL(None).lazymalloc_version
f.restype = ctypes.c_char_p
print(f().decode())') || { echo "run-suites: python3.11 does not start with $lib preloaded" >&2; return 2; }

echo "run-suites: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, Linux $(uname -r), $($py -V 2>&1)"
echo "run-suites: lazymalloc $ver ($lib), PYTHONMALLOC=${pymalloc:-<default>}, ${#tests[@]} tests, -j$jobs"

run_suite() {  # name, extra env...
  local name=$1
  shift
  local t0 t1 rc
  t0=$(date +%s)
  set +e
  # Run from an empty directory: some tests write temporary files into the cwd.
  (cd "$out" && env ${pymalloc:+PYTHONMALLOC=$pymalloc} "$@" \
     $py -m test -j"$jobs" -o --timeout 300 "${tests[@]}") >"$out/$name.log" 2>&1
  rc=$?
  set -e
  t1=$(date +%s)
  echo $((t1 - t0)) >"$out/$name.secs"
  echo "run-suites: $name: exit $rc in $((t1 - t0)) s (log $out/$name.log)"
}

run_suite glibc
run_suite lazymalloc LD_PRELOAD="$lib"

# Per-test comparison from regrtest's progress lines and result summary.
$py - "$out" "$lib" "$pymalloc" "${tests[@]}" <<'EOF'
import os, re, subprocess, sys
out, lib, pymalloc, tests = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

def parse(path):
    text = open(path, errors="replace").read()
    seen, status, secs = set(), {}, {}
    for m in re.finditer(r"\[\s*\d+/\d+(?:/\d+)?\] (test_\w+)(.*)$", text, re.M):
        seen.add(m.group(1))
    for m in re.finditer(r"^- (test_\w+): (?:(\d+) min )?(\d+(?:\.\d+)?) sec", text, re.M):
        secs[m.group(1)] = 60 * int(m.group(2) or 0) + float(m.group(3))
    # Summary blocks: "2 tests failed:" followed by indented names.
    cats = [("failed", "FAIL"), ("altered the execution environment", "env-changed"),
            ("skipped", "skipped"), ("run no tests", "no-tests"), ("omitted", "omitted"),
            ("resource denied", "skipped"), ("crashed", "FAIL"), ("interrupted", "FAIL"),
            ("re-run tests", None), ("timed out", "FAIL")]
    for m in re.finditer(r"^(?:\d+|All \d+) tests? ([a-z -]+?)(?: \(env changed\))?:\n((?:    .*\n?)+)", text, re.M):
        label = next((l for k, l in cats if m.group(1).startswith(k)), None)
        if label is None:
            continue
        for name in m.group(2).split():
            if status.get(name) != "FAIL":
                status[name] = label
    finished = "== Tests result:" in text or "Tests result:" in text
    res = {}
    for t in tests:
        if t in status:
            res[t] = status[t]
        elif t in seen and finished:
            res[t] = "ok"
        else:
            res[t] = "not-run"
    return res, secs

g, gsecs = parse(os.path.join(out, "glibc.log"))
l, lsecs = parse(os.path.join(out, "lazymalloc.log"))
good = {"ok", "env-changed", "skipped", "no-tests"}
regress = [t for t in tests if g[t] in good - {"skipped", "no-tests"} and l[t] not in good]
flaky = []
for t in regress:  # one serial re-run with preload tells flaky from broken
    env = dict(os.environ, LD_PRELOAD=lib)
    if pymalloc:
        env["PYTHONMALLOC"] = pymalloc
    r = subprocess.run([sys.executable, "-m", "test", "--timeout", "300", t], cwd=out, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if r.returncode == 0:
        flaky.append(t)
hard = [t for t in regress if t not in flaky]

def fmt(s):
    return f"{s:.1f}" if s is not None else "-"
print(f"\n{'test':24} {'glibc':>12} {'lazymalloc':>12}  {'glibc s':>8} {'lazy s':>8}")
for t in tests:
    mark = " <-- REGRESSION" if t in hard else (" (flaky: passed on re-run)" if t in flaky else "")
    print(f"{t:24} {g[t]:>12} {l[t]:>12}  {fmt(gsecs.get(t)):>8} {fmt(lsecs.get(t)):>8}{mark}")
def count(r):
    c = {}
    for v in r.values():
        c[v] = c.get(v, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
gs = open(os.path.join(out, "glibc.secs")).read().strip()
ls = open(os.path.join(out, "lazymalloc.secs")).read().strip()
print(f"\ntotals: glibc: {count(g)} ({gs} s wall); lazymalloc: {count(l)} ({ls} s wall)")
print("(per-test seconds: regrtest's -o list of the slowest tests, '-' when not listed)")
if hard:
    print("REGRESSIONS (pass without lazymalloc, fail with it):", " ".join(hard))
    sys.exit(1)
print("no regressions" + (f" (flaky under preload, passed on re-run: {' '.join(flaky)})" if flaky else ""))
EOF
}

for suite in $suites; do
  rc=0
  case $suite in
    python) python_suite || rc=$? ;;
    glib) glib_suite || rc=$? ;;
    *) echo "run-suites: unknown suite $suite" >&2; rc=2 ;;
  esac
  ((rc > status)) && status=$rc
done
exit $status
