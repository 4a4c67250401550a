#!/usr/bin/env bash
# readme.using_it: runs the commands of README.md's "Using it" section, the
# ```sh blocks between <!-- readme-test:begin --> and <!-- readme-test:end -->,
# as a user would from the top of a checkout, and fails if any fails.
# Where the test differs from a fresh checkout, and why:
#  - it runs in a scratch directory (outside the build tree) whose entries
#    are links to the source tree's, so the files the commands write stay
#    out of the source, with `build` linked to this build directory;
#  - the cmake commands get the real directories: `cmake -S . -B build`
#    becomes `cmake -S SOURCE_DIR -B BUILD_DIR` (configured through the
#    link, CMake would take the link for a new build directory and rebuild
#    everything there), `cmake --build build` and `cmake --install build`
#    name BUILD_DIR;
#  - HOME is a directory of its own, so the install goes there.
# Usage: using_it_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(realpath "$1") build=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/lazymalloc-readme.XXXXXX")
readme=$src/README.md
fail() { echo "readme.using_it: FAIL: $*" >&2; exit 1; }

script=$(awk '
  /<!-- readme-test:begin -->/ { on = 1; next }
  /<!-- readme-test:end -->/   { on = 0; next }
  on && /^```sh[[:space:]]*$/  { code = 1; next }
  on && /^```[[:space:]]*$/    { code = 0; next }
  on && code                   { print }
' "$readme")
commands=$(grep -cEv '^[[:space:]]*(#|$)' <<<"$script" || true)
((commands >= 10)) || fail "found $commands commands between the readme-test markers of $readme (expected the Using it section)"
for form in 'cmake -S . -B build' 'cmake --build build' 'cmake --install build'; do
  grep -qF "$form" <<<"$script" || fail "the section no longer says '$form': update this test's substitutions"
done
script=${script//cmake -S . -B build/cmake -S \"$src\" -B \"$build\"}
script=${script//cmake --build build/cmake --build \"$build\"}
script=${script//cmake --install build/cmake --install \"$build\"}

mkdir -p "$work/home"
for entry in "$src"/* "$src"/.[!.]*; do
  [[ -e $entry ]] || continue
  name=$(basename "$entry")
  [[ $name == build* || $name == .git ]] && continue
  ln -s "$entry" "$work/$name"
done
ln -s "$build" "$work/build"
printf '%s\n' "$script" >"$work/using-it.sh"
echo "readme.using_it: running $commands commands from $readme in $work"
(cd "$work" && HOME="$work/home" bash -e -o pipefail -x ./using-it.sh) || fail "a command of the Using it section failed (above: the last + line)"
[[ -s $work/mem.tsv && $(wc -l <"$work/mem.tsv") -ge 2 ]] || fail "the --timeline command wrote no samples"
grep -q '<svg' "$work/mem.svg" || fail "the --plot command drew no SVG"
rm -rf "$work"
echo "readme.using_it: ok"
