#!/usr/bin/env bash
# install.deb: builds the .deb with cpack (as `cpack -G DEB` in the build
# directory does), lists it with dpkg-deb -c and checks that it holds the
# libraries, the headers, the pkg-config and CMake files and lazymalloc-run;
# then unpacks it and runs the packaged lazymalloc-run and pkg-config from
# the unpacked tree.
# Usage: deb_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
fail() { echo "install.deb: FAIL: $*" >&2; exit 1; }
command -v dpkg-deb >/dev/null || fail "dpkg-deb not found (Debian: package dpkg)"
rm -rf "$work" && mkdir -p "$work"
(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || fail "cpack -G DEB (see $work/cpack.log)"
debs=("$work"/out/lazymalloc_*.deb)
[[ ${#debs[@]} -eq 1 && -f ${debs[0]} ]] || fail "expected one lazymalloc_*.deb in $work/out: $(ls "$work/out")"
deb=${debs[0]}
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./||' >"$work/contents"
need=(usr/bin/lazymalloc-run
      'usr/lib/([^/]+/)?liblazymalloc\.so\.0\.[0-9.]+' 'usr/lib/([^/]+/)?liblazymalloc\.so'
      'usr/lib/([^/]+/)?liblazymalloc\.a' 'usr/lib/([^/]+/)?liblazymalloc_api\.a'
      usr/include/lazymalloc/lazymalloc.h usr/include/lazymalloc/version.h
      'usr/lib/([^/]+/)?pkgconfig/lazymalloc\.pc'
      'usr/lib/([^/]+/)?cmake/lazymalloc/lazymalloc-config\.cmake'
      'usr/lib/([^/]+/)?cmake/lazymalloc/lazymalloc-config-version\.cmake'
      'usr/lib/([^/]+/)?cmake/lazymalloc/lazymallocTargets\.cmake')
for re in "${need[@]}"; do
  grep -Eqx "$re" "$work/contents" || fail "$(basename "$deb") lacks $re; it holds: $(tr '\n' ' ' <"$work/contents")"
done
[[ $(dpkg-deb -f "$deb" Package) == lazymalloc ]] || fail "package name $(dpkg-deb -f "$deb" Package)"
dpkg-deb -x "$deb" "$work/root"
root="$work/root"
env -u LAZYMALLOC_LIB "$root/usr/bin/lazymalloc-run" --print-env | grep "^LD_PRELOAD=$root/usr/lib/" >/dev/null ||
  fail "packaged lazymalloc-run does not find the packaged library"
out=$(env -u LAZYMALLOC_LIB "$root/usr/bin/lazymalloc-run" --stats -- /bin/true 2>&1) || fail "packaged lazymalloc-run -- true: $out"
grep -q active_bytes <<<"$out" || fail "packaged lazymalloc-run --stats printed no statistics: $out"
pc=$(find "$root" -name lazymalloc.pc)
[[ -f $(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=includedir lazymalloc)/lazymalloc/lazymalloc.h ]] ||
  fail "packaged lazymalloc.pc does not point at the packaged headers"
echo "install.deb: ok ($(basename "$deb"))"
