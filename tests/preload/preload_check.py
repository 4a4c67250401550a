#!/usr/bin/env python3
"""Runs a real program with and without LD_PRELOAD=liblazymalloc.so and
compares the results.

    preload_check.py --lib build/liblazymalloc.so --case sort --workdir DIR

Each case is a list of steps (commands).  Every step runs once plainly and
once under the preload with LAZYMALLOC_STATS=json; the test fails if an exit
status is non-zero, if stdout differs, or if the preloaded run's stderr does
not carry a lazymalloc JSON statistics object showing allocations (which
proves the preload took effect).  Exit status 77 means "skipped" (the
program is not installed).
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap

SKIP = 77
TIMEOUT = 600


class CheckFailed(Exception):
    pass


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("LAZYMALLOC_")}
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TZ"] = "UTC"
    return env


class Step:
    def __init__(self, name, argv, stdin=None, cwd=None, env=None, per_mode_cwd=False,
                 compare=True, probe=None):
        self.name = name
        # Some programs (coreutils, mawk) close stderr before exiting, so the
        # allocator's exit-time statistics cannot appear.  For them `probe`
        # is a command line of the same program that prints its own
        # /proc/self/maps, which must show the preloaded library.
        self.probe = probe
        self.argv = argv
        self.stdin = stdin
        self.cwd = cwd
        self.env = env or {}
        self.per_mode_cwd = per_mode_cwd  # run in <cwd>/plain and <cwd>/preload
        self.compare = compare


def find_stats_objects(stderr_text):
    """Every JSON object in stderr that looks like lazymalloc's statistics."""
    dec = json.JSONDecoder()
    found = []
    i = 0
    while True:
        i = stderr_text.find("{", i)
        if i < 0:
            break
        try:
            obj, end = dec.raw_decode(stderr_text, i)
        except ValueError:
            i += 1
            continue
        if isinstance(obj, dict) and "stats" in obj:
            found.append(obj)
        i = end
    return found


def shows_allocations(obj):
    stats = obj.get("stats")
    if not isinstance(stats, dict):
        return False
    words = ("alloc", "span", "refill", "active")
    return any(isinstance(v, int) and v > 0 and any(w in k for w in words)
               for k, v in stats.items())


class Runner:
    def __init__(self, lib, workdir, version):
        self.lib = os.path.abspath(lib)
        self.version = version
        self.workdir = workdir
        self.stats_objects = 0
        self.steps_checked = 0

    def run(self, step, preload):
        env = clean_env()
        env.update(step.env)
        if preload:
            env["LD_PRELOAD"] = self.lib
            env["LAZYMALLOC_STATS"] = "json"
        cwd = step.cwd or self.workdir
        if step.per_mode_cwd:
            cwd = os.path.join(cwd, "preload" if preload else "plain")
            os.makedirs(cwd, exist_ok=True)
        try:
            p = subprocess.run(step.argv, input=step.stdin, cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"{step.name}: timed out ({'preload' if preload else 'plain'})")
        return p

    def check_probe(self, step):
        env = clean_env()
        env["LD_PRELOAD"] = self.lib
        p = subprocess.run(step.probe, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=TIMEOUT)
        maps = p.stdout.decode(errors="replace")
        if p.returncode != 0 or os.path.realpath(self.lib) not in maps and self.lib not in maps:
            raise CheckFailed(
                f"{step.name}: no statistics on stderr, and {step.probe} under LD_PRELOAD "
                f"(exit {p.returncode}) does not show {self.lib} mapped:\n{maps[-2000:]}")

    def check(self, step):
        plain = self.run(step, False)
        if plain.returncode != 0:
            raise CheckFailed(
                f"{step.name}: the plain run failed (exit {plain.returncode}) -- a test problem:\n"
                + plain.stderr.decode(errors="replace")[-3000:])
        pre = self.run(step, True)
        err = pre.stderr.decode(errors="replace")
        if pre.returncode != 0:
            raise CheckFailed(
                f"{step.name}: exit status {pre.returncode} under LD_PRELOAD (plain run: 0)\n"
                f"command: {step.argv}\nstderr tail:\n{err[-4000:]}")
        if step.compare and plain.stdout != pre.stdout:
            a = plain.stdout.decode(errors="replace").splitlines()
            b = pre.stdout.decode(errors="replace").splitlines()
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]),
                         min(len(a), len(b)))
            raise CheckFailed(
                f"{step.name}: stdout differs under LD_PRELOAD ({len(a)} vs {len(b)} lines, "
                f"first difference at line {first + 1}):\n"
                f"  plain:   {a[first] if first < len(a) else '<end>'}\n"
                f"  preload: {b[first] if first < len(b) else '<end>'}")
        objs = find_stats_objects(err)
        if not objs and step.probe:
            self.check_probe(step)
            self.steps_checked += 1
            print(f"ok   {step.name}: {len(pre.stdout)} bytes of identical output, "
                  f"preload seen in /proc/self/maps (the program closes stderr)")
            return plain, pre
        if not objs:
            raise CheckFailed(
                f"{step.name}: no lazymalloc JSON statistics on stderr with LAZYMALLOC_STATS=json "
                f"-- did the preload take effect?\nstderr tail:\n{err[-2000:]}")
        for o in objs:
            if o.get("version") != self.version:
                raise CheckFailed(f"{step.name}: statistics report version {o.get('version')!r}")
        if not any(shows_allocations(o) for o in objs):
            raise CheckFailed(f"{step.name}: statistics show no allocations: {objs[0]}")
        self.stats_objects += len(objs)
        self.steps_checked += 1
        print(f"ok   {step.name}: {len(pre.stdout)} bytes of identical output, "
              f"{len(objs)} lazymalloc stats object(s)")
        return plain, pre


# ------------------------------------------------------------------ cases

PY_SCRIPT = r'''
import json, hashlib, threading, collections, random

rng = random.Random(12345)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12)))
         for _ in range(20000)]
d = {}
for i in range(200000):
    k = words[i % len(words)] + str(i)
    d[k] = {"i": i, "w": words[(i * 7) % len(words)], "l": list(range(i % 17)),
            "s": "x" * (i % 300)}
text = json.dumps(d, sort_keys=True)
back = json.loads(text)
assert back == d
h = hashlib.sha256(text.encode()).hexdigest()
print("dict", len(d), "json", len(text), h)

counter = collections.Counter()
for k, v in back.items():
    counter[v["w"]] += len(v["l"]) + len(v["s"])
print("top", sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:10])

# Big and small strings, list growth and shrinkage.
parts = []
for i in range(100000):
    parts.append(("%08d" % i) * (1 + i % 50))
    if i % 1000 == 999:
        del parts[:500]
blob = "|".join(parts)
print("blob", len(blob), hashlib.md5(blob.encode()).hexdigest())

# Threads allocating (the GIL serialises bytecode, not malloc).
results = [None] * 4
def work(n):
    r = random.Random(n)
    acc = []
    for j in range(30000):
        acc.append(bytes(r.getrandbits(8) for _ in range(r.randint(0, 40))))
        if len(acc) > 500:
            acc = acc[250:]
    results[n] = hashlib.sha1(b"".join(acc)).hexdigest()
ts = [threading.Thread(target=work, args=(n,)) for n in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print("threads", results)

s = set()
for i in range(300000):
    s.add((i * 2654435761) % 1000003)
print("set", len(s), sum(s) % 1000000007)
'''


def case_python(r):
    script = os.path.join(r.workdir, "alloc_heavy.py")
    with open(script, "w") as f:
        f.write(PY_SCRIPT)
    r.check(Step("python3 alloc_heavy.py", [sys.executable, script]))
    r.check(Step("python3 json stdin round-trip",
                 [sys.executable, "-c",
                  "import json,sys; d=json.load(sys.stdin); "
                  "print(json.dumps(d, sort_keys=True, indent=1))"],
                 stdin=json.dumps({str(i): [i, str(i) * 5, {"k": i}] for i in range(50000)}).encode()))
    # The text form of LAZYMALLOC_STATS=1 is printed too.
    env = clean_env()
    env["LD_PRELOAD"] = r.lib
    env["LAZYMALLOC_STATS"] = "1"
    p = subprocess.run([sys.executable, "-c", "print(sum(len(str(i)) for i in range(100000)))"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
    if p.returncode != 0 or p.stdout.strip() != b"488890":
        raise CheckFailed(f"LAZYMALLOC_STATS=1 run failed: {p.returncode} {p.stdout!r}")
    if f"lazymalloc {r.version} statistics".encode() not in p.stderr:
        raise CheckFailed("LAZYMALLOC_STATS=1 printed no text statistics on stderr:\n"
                          + p.stderr.decode(errors="replace")[-2000:])
    print("ok   LAZYMALLOC_STATS=1 prints text statistics")


def case_sort(r):
    if not shutil.which("sort"):
        return SKIP
    path = os.path.join(r.workdir, "lines.txt")
    rng = random.Random(4242)
    with open(path, "w") as f:
        for i in range(200000):
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                           for _ in range(rng.randint(1, 30)))
            f.write(f"{word} {rng.randint(0, 10**9)} {i}\n")
    probe = ["sort", "/proc/self/maps"]
    r.check(Step("sort", ["sort", path], probe=probe))
    r.check(Step("sort -n -k2", ["sort", "-n", "-k2,2", "-k3,3n", path], probe=probe))
    r.check(Step("sort -u -r", ["sort", "-u", "-r", path], probe=probe))
    tmp = os.path.join(r.workdir, "sorttmp")
    os.makedirs(tmp, exist_ok=True)
    # Small buffer: temporary files and a multi-threaded merge.
    r.check(Step("sort --parallel=2 -S 2M", ["sort", "--parallel=2", "-S", "2M", "-T", tmp,
                                               "-k1,1", "-k2,2n", path], probe=probe))


CXX_PROGRAM = r'''
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <regex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

template <int N> struct Fib { static constexpr long v = Fib<N - 1>::v + Fib<N - 2>::v; };
template <> struct Fib<1> { static constexpr long v = 1; };
template <> struct Fib<0> { static constexpr long v = 0; };

int main() {
  std::map<std::string, std::vector<int>> m;
  for (int i = 0; i < 20000; ++i) m["k" + std::to_string(i % 997)].push_back(i);
  std::unordered_map<int, std::unique_ptr<std::string>> u;
  for (int i = 0; i < 50000; ++i) u[i] = std::make_unique<std::string>(i % 100, 'a' + i % 26);
  long total = 0;
  for (auto& [k, v] : m) total += std::accumulate(v.begin(), v.end(), 0L) % 1000;
  for (auto& [k, v] : u) total += v->size();
  std::regex re("k([0-9]+)");
  std::smatch sm;
  int matches = 0;
  for (auto& [k, v] : m) if (std::regex_match(k, sm, re)) matches += std::stoi(sm[1]) % 7;
  std::vector<std::string> words;
  std::istringstream in("the quick brown fox jumps over the lazy dog again and again");
  for (std::string w; in >> w;) words.push_back(w);
  std::sort(words.begin(), words.end());
  std::cout << "total " << total << " matches " << matches << " fib " << Fib<60>::v << "\n";
  for (auto& w : words) std::cout << w << ' ';
  std::cout << "\n";
}
'''


def case_gxx(r):
    cxx = shutil.which("g++")
    if not cxx:
        return SKIP
    src = os.path.join(r.workdir, "prog.cc")
    with open(src, "w") as f:
        f.write(CXX_PROGRAM)
    # Assembly output must be identical: the compiler computed the same thing.
    r.check(Step("g++ -S", [cxx, "-std=c++17", "-O2", "-S", "-o", "-", src]))
    # Full compile + link, in separate directories, then run both programs.
    step = Step("g++ compile+link", [cxx, "-std=c++17", "-O2", "-o", "prog", src],
                per_mode_cwd=True)
    r.check(step)
    plain_bin = os.path.join(r.workdir, "plain", "prog")
    pre_bin = os.path.join(r.workdir, "preload", "prog")
    with open(plain_bin, "rb") as a, open(pre_bin, "rb") as b:
        if a.read() != b.read():
            raise CheckFailed("the binary linked under LD_PRELOAD differs from the plain one")
    env = clean_env()
    out_plain = subprocess.run([plain_bin], env=env, stdout=subprocess.PIPE, timeout=TIMEOUT)
    out_pre = subprocess.run([pre_bin], env=env, stdout=subprocess.PIPE, timeout=TIMEOUT)
    if out_plain.returncode != 0 or out_pre.returncode != 0 or out_plain.stdout != out_pre.stdout:
        raise CheckFailed(f"compiled programs disagree: {out_plain.stdout!r} vs {out_pre.stdout!r}")
    # The program itself under the preload.
    r.check(Step("prog (compiled under preload) run under preload", [pre_bin]))
    print("ok   binaries identical, outputs identical")


def case_git(r):
    git = shutil.which("git")
    if not git:
        return SKIP
    home = os.path.join(r.workdir, "home")
    os.makedirs(home, exist_ok=True)
    env = {
        "HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@x",
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    }
    base = os.path.join(r.workdir, "repo")
    os.makedirs(base, exist_ok=True)
    g = [git, "-c", "init.defaultBranch=main", "-c", "gc.auto=0", "-c", "core.pager=cat"]
    script = textwrap.dedent("""\
        set -e
        {git} init -q .
        i=0
        while [ $i -lt 300 ]; do
          mkdir -p d$((i % 10))
          seq $i $((i * 7 + 50)) > d$((i % 10))/f$i.txt
          i=$((i + 1))
        done
        {git} add -A
        {git} commit -q -m first
        i=0
        while [ $i -lt 300 ]; do
          if [ $((i % 3)) -eq 0 ]; then echo "change $i" >> d$((i % 10))/f$i.txt; fi
          i=$((i + 1))
        done
        {git} rm -q d1/f1.txt
        {git} commit -q -a -m second
        """).replace("{git}", " ".join(g))
    # The shell runs the git commands; LD_PRELOAD reaches every git process.
    r.check(Step("git init/add/commit", ["sh", "-c", script], env=env, cwd=base, per_mode_cwd=True,
                 compare=True))
    for name, args in [("git log --stat", ["log", "--stat", "--format=%H %s"]),
                       ("git diff HEAD~1", ["diff", "HEAD~1"]),
                       ("git rev-list --objects", ["rev-list", "--objects", "--all"]),
                       ("git gc + fsck", None)]:
        if args is None:
            r.check(Step(name, ["sh", "-c", " ".join(g) + " gc -q && " + " ".join(g) +
                                " fsck --full --strict && " + " ".join(g) + " count-objects -v"
                                " | grep -v size"],
                         env=env, cwd=base, per_mode_cwd=True))
        else:
            r.check(Step(name, g + args, env=env, cwd=base, per_mode_cwd=True))


def case_awk(r):
    awk = shutil.which("awk")
    if not awk:
        return SKIP
    path = os.path.join(r.workdir, "words.txt")
    rng = random.Random(99)
    vocab = ["".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    with open(path, "w") as f:
        for i in range(60000):
            f.write(" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 15))) + "\n")
    prog = r'''
      { for (i = 1; i <= NF; i++) { c[$i]++; len[$i] = length($i) }
        line[NR] = $0; total += NF }
      END {
        n = 0
        for (w in c) { n++; s = s sprintf("%s:%d;", w, c[w]) ; if (length(s) > 200000) s = "" }
        print "words", total, "distinct", n
        big = ""
        for (i = 1; i <= NR; i += 3) big = big substr(line[i], 1, 20)
        print "big", length(big)
        k = split(big, parts, "e")
        print "parts", k
        for (w in c) if (c[w] > 250) print w, c[w]
      }'''
    r.check(Step("awk word count", [awk, prog, path], probe=[awk, "{ print }", "/proc/self/maps"]))


SQL = """
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 200000)
INSERT INTO t SELECT i, i % 113, printf('name-%08d-%s', i, hex(i * 31)), (i * 7919) % 10007 / 3.0 FROM s;
CREATE INDEX t_grp ON t(grp, val);
SELECT grp, count(*), printf('%.3f', avg(val)), max(name) FROM t GROUP BY grp ORDER BY grp;
SELECT count(DISTINCT name), sum(length(name)) FROM t;
CREATE TABLE u AS SELECT grp, group_concat(name, ',') AS names FROM t WHERE id % 10 = 0 GROUP BY grp;
SELECT grp, length(names), substr(names, 1, 40) FROM u ORDER BY grp;
SELECT a.grp, count(*) FROM t a JOIN u b ON a.grp = b.grp WHERE a.val > 3000 GROUP BY a.grp ORDER BY 2 DESC, 1 LIMIT 20;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
SELECT count(*), sum(val) FROM t;
"""


def case_sqlite3(r):
    sq = shutil.which("sqlite3")
    if not sq:
        return SKIP
    r.check(Step("sqlite3 :memory:", [sq, ":memory:"], stdin=SQL.encode()))
    r.check(Step("sqlite3 file db", ["sh", "-c", f"rm -f db.sqlite && {sq} db.sqlite"],
                 stdin=SQL.encode(), per_mode_cwd=True))


CASES = {
    "python": case_python,
    "sort": case_sort,
    "gxx": case_gxx,
    "git": case_git,
    "awk": case_awk,
    "sqlite3": case_sqlite3,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="path to liblazymalloc.so")
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--version", required=True, help="the version the statistics must report")
    a = ap.parse_args()
    if not os.path.isfile(a.lib):
        print(f"FAIL: {a.lib} does not exist", file=sys.stderr)
        return 1
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    r = Runner(a.lib, os.path.abspath(a.workdir), a.version)
    try:
        rc = CASES[a.case](r)
    except CheckFailed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    if rc == SKIP:
        print(f"SKIP: the program for case {a.case} is not installed")
        return SKIP
    if r.steps_checked == 0:
        print("FAIL: no step was checked", file=sys.stderr)
        return 1
    print(f"PASS: {r.steps_checked} step(s), {r.stats_objects} statistics object(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
