#!/usr/bin/env bash
# install.sh: cmake --install puts fatune, libfatune (shared and static),
# fatune.h and fatune.pc under a prefix, and a program built against them
# with pkg-config alone runs (the example, on the emulator).
#
# usage: BUILD=build bash tests/install.sh
set -u
NAME=install
FATUNE=${BUILD:?}/fatune
. "$(dirname "$0")/cli_lib.sh"
if [ "${SANITIZE:-OFF}" = ON ]; then
  echo "SKIPPED: a sanitizer build's library needs the sanitizer runtime in every program"
  exit 77
fi
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "SKIPPED: pkg-config is not installed"
  exit 77
fi
prefix="$tmp/prefix"
cmake --install "$BUILD" --prefix "$prefix" >"$tmp/install.log" 2>&1
if [ $? -eq 0 ]; then pass "cmake --install"; else fail "cmake --install" "$(tail -5 "$tmp/install.log")"; fi
for f in bin/fatune include/fatune.h; do
  [ -e "$prefix/$f" ] && pass "installed $f" || fail "installed $f" "missing"
done
for f in libfatune.so libfatune.a fatune.pc; do
  found=$(find "$prefix" -name "$f" | head -1)
  [ -n "$found" ] && pass "installed ${found#$prefix/}" || fail "installed $f" "missing"
done
pcdir=$(dirname "$(find "$prefix" -name fatune.pc | head -1)")
libdir=$(dirname "$(find "$prefix" -name libfatune.so | head -1)")
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs fatune)
${CC:-cc} -std=c11 -Wall -Wextra -Werror "$(dirname "$0")/../examples/attention.c" $flags -lm \
  -Wl,-rpath,"$libdir" -o "$tmp/attention" 2>"$tmp/cc.log"
if [ $? -eq 0 ]; then pass "the example builds with pkg-config: $flags"
else fail "the example builds with pkg-config" "$(head -c 400 "$tmp/cc.log")"; fi
"$tmp/attention" "$tmp/lib.db" >"$tmp/run.log" 2>&1
if [ $? -eq 0 ]; then pass "it runs against the shared library: $(cat "$tmp/run.log")"
else fail "it runs against the shared library" "$(head -c 400 "$tmp/run.log")"; fi
ldd "$tmp/attention" | grep -q "$libdir/libfatune.so" && pass "linked to the installed libfatune.so" ||
  fail "linked to the installed libfatune.so" "$(ldd "$tmp/attention" | grep fatune)"
finish
