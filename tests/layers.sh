#!/usr/bin/env bash
# layers.sh: libfatune is the layers up to lib and nothing more. The shared
# library exports only the fatune_* functions of include/fatune.h, and
# neither it nor the static one holds an object of the tuner layer (the
# command's compile pool, validation, JSON, workers, flows).
#
# usage: BUILD=build bash tests/layers.sh
set -u
NAME=layers
FATUNE=${BUILD:?}/fatune
. "$(dirname "$0")/cli_lib.sh"
if ! command -v nm >/dev/null 2>&1; then
  echo "SKIPPED: nm is not installed"
  exit 77
fi
so="$BUILD/libfatune.so" a="$BUILD/libfatune.a"

exported=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBR]$/ {print $3}')
others=$(echo "$exported" | grep -v '^fatune_' | grep -v '^$')
[ -n "$exported" ] && [ -z "$others" ] &&
  pass "libfatune.so exports only fatune_*: $(echo "$exported" | tr '\n' ' ')" ||
  fail "libfatune.so exports only fatune_*" "also: $(echo "$others" | tr '\n' ' ')"

# Every public function is there, as declared.
declared=$(grep -o 'fatune_[a-z_]*(' "$(dirname "$0")/../include/fatune.h" | tr -d '(' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported" | sort -u))
[ -z "$missing" ] && pass "every function of fatune.h is exported" ||
  fail "every function of fatune.h is exported" "missing: $missing"

tuner_objs=$(cd "$(dirname "$0")/../tuner" && ls ./*.c | sed 's|^\./||; s|$|.o|')
in_lib=$(nm -A "$a" 2>/dev/null | awk -F: '{print $2}' | sort -u)
found=$(comm -12 <(echo "$tuner_objs" | sort -u) <(echo "$in_lib"))
[ -n "$in_lib" ] && [ -z "$found" ] && pass "libfatune.a holds no tuner object" ||
  fail "libfatune.a holds no tuner object" "found: $(echo "$found" | tr '\n' ' ')"
# The shared library's symbol table (the static one, names of hidden
# functions included) shows none of the tuner's functions either.
tuner_syms=$(nm "$so" | awk '{print $NF}' | grep -E '^(val_|wk_|compile_pool_|tune_|explore_|ex_|json_)' | head -5)
[ -z "$tuner_syms" ] && pass "libfatune.so holds no tuner function" ||
  fail "libfatune.so holds no tuner function" "$tuner_syms"
finish
