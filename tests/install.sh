#!/usr/bin/env bash
# install.sh: cmake --install puts fatune, libfatune (shared and static),
# fatune.h and fatune.pc under a prefix, and a program built against them
# with pkg-config alone runs with no environment at all (env -i: no
# LD_LIBRARY_PATH), as does the installed fatune; fatune.pc names no path
# of this machine, so the prefix can move.
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
for f in share/bash-completion/completions/fatune share/zsh/site-functions/_fatune; do
  [ -s "$prefix/$f" ] && pass "installed $f" || fail "installed $f" "missing"
done
if command -v help2man >/dev/null 2>&1; then
  man=$(find "$prefix" -name fatune.1 | head -1)
  [ -n "$man" ] && grep -qF 'emu\-seq' "$man" && grep -q '^\.TH FATUNE' "$man"
  check "installed the man page, made from fatune --help: ${man#$prefix/}" $? "missing or empty"
else
  echo "SKIPPED the man page check: no help2man (scripts/install-deps.sh installs it)"
fi
pcdir=$(dirname "$(find "$prefix" -name fatune.pc | head -1)")
libdir=$(dirname "$(find "$prefix" -name libfatune.so | head -1)")
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs fatune)
${CC:-cc} -std=c11 -Wall -Wextra -Werror "$(dirname "$0")/../examples/attention.c" $flags -lm \
  -o "$tmp/attention" 2>"$tmp/cc.log"
if [ $? -eq 0 ]; then pass "the example builds with pkg-config alone: $flags"
else fail "the example builds with pkg-config" "$(head -c 400 "$tmp/cc.log")"; fi
# No environment: HOME for the database and the key, PATH for the host compiler.
env -i HOME="$tmp/home" PATH=/usr/bin:/bin "$tmp/attention" "$tmp/lib.db" >"$tmp/run.log" 2>&1
if [ $? -eq 0 ]; then pass "it runs with no environment (env -i): $(cat "$tmp/run.log")"
else fail "it runs with no environment (env -i)" "$(head -c 400 "$tmp/run.log")"; fi
env -i HOME="$tmp/home" PATH=/usr/bin:/bin "$prefix/bin/fatune" list --dim 64 >"$tmp/list.log" 2>&1
if [ $? -eq 0 ]; then pass "the installed fatune runs with no environment"
else fail "the installed fatune runs with no environment" "$(head -c 400 "$tmp/list.log")"; fi
! grep -v '^#' "$pcdir/fatune.pc" | grep -qE '(^|[ =])/'
check "fatune.pc holds no absolute path (the prefix is \${pcfiledir}'s)" $? \
  "$(grep -v '^#' "$pcdir/fatune.pc" | grep -E '(^|[ =])/')"
moved="$tmp/moved"
mv "$prefix" "$moved"
flags=$(PKG_CONFIG_PATH="${pcdir/$prefix/$moved}" pkg-config --libs fatune)
${CC:-cc} -std=c11 "$(dirname "$0")/../examples/attention.c" $(PKG_CONFIG_PATH="${pcdir/$prefix/$moved}" \
  pkg-config --cflags fatune) $flags -lm -o "$tmp/attention2" 2>"$tmp/cc2.log" &&
  env -i HOME="$tmp/home" PATH=/usr/bin:/bin "$tmp/attention2" "$tmp/lib2.db" >"$tmp/run2.log" 2>&1
check "a moved prefix: built from its fatune.pc, it runs with no environment" $? \
  "$(head -c 300 "$tmp/cc2.log" "$tmp/run2.log")"
mv "$moved" "$prefix"
got=$(ldd "$tmp/attention" | awk '/libfatune/ { print $3 }')
[ -n "$got" ] && [ "$(readlink -f "$got")" = "$(readlink -f "$libdir/libfatune.so")" ]
check "linked to the installed libfatune.so" $? "$(ldd "$tmp/attention" | grep fatune)"
finish
