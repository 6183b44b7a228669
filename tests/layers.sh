#!/usr/bin/env bash
# layers.sh: the layers include in one direction only, and libfatune is the
# layers up to lib and nothing more.
#  - Includes, read from the sources: a file of a layer includes only its
#    own headers and those of the layers it stands on (see allowed below):
#    no backend header (runtime's subfolders, runtime/emu and runtime/cuda)
#    from tuner, db or lib; nothing of the generator or runtime from db;
#    nothing of another layer from core; no runtime, db, lib or tuner header
#    from the generator; no db, lib or tuner header from the runtime; no
#    tuner header from lib; within the command, output stands on nothing of
#    it, analysis on output, the trial machinery on both, the commands
#    (tuner/ itself) on all. Each header belongs to the layer of its folder.
#    A self-test plants violations in a copy of the sources and expects each
#    one named by file and line.
#  - Symbols: the shared library exports only the fatune_* functions of
#    include/fatune.h, and neither it nor the static one holds an object of
#    the tuner layer (the command's compile pool, validation, JSON, workers,
#    flows).
#
# usage: BUILD=build bash tests/layers.sh
set -u
NAME=layers
FATUNE=${BUILD:?}/fatune
. "$(dirname "$0")/cli_lib.sh"
src=$(cd "$(dirname "$0")/.." && pwd)

# The folders of a layer under ROOT; backend is every subfolder of runtime.
layer_dirs() {   # ROOT LAYER
  case $2 in
  runtime) echo runtime ;;
  backend) (cd "$1" && find runtime -mindepth 1 -maxdepth 1 -type d | sort) ;;
  lib) echo lib include ;;
  trial | analysis | output) echo "tuner/$2" ;;
  *) echo "$2" ;;
  esac
}
# The layers whose headers a layer's files may include, itself first.
allowed() {
  case $1 in
  core) echo core ;;
  generator) echo generator core ;;
  runtime | backend) echo runtime backend generator core ;;
  db) echo db core ;;
  lib) echo lib db runtime generator core ;;
  output) echo output runtime generator core ;;
  analysis) echo analysis output runtime generator core ;;
  trial) echo trial analysis output db runtime generator core ;;
  tuner) echo tuner trial analysis output lib db runtime generator core ;;
  esac
}
LAYERS="core generator runtime backend db lib output analysis trial tuner"

# include_check ROOT: prints FILE:LINE: for each include against the
# direction (paths relative to ROOT); 1 when there is one.
include_check() {
  local root=$1 layer dir f h bad=0
  declare -A owner=()
  for layer in $LAYERS; do
    for dir in $(layer_dirs "$root" "$layer"); do
      for h in "$root/$dir"/*.h; do
        [ -e "$h" ] || continue
        h=${h##*/}
        if [ -n "${owner[$h]:-}" ]; then
          echo "$dir/$h: the name is a header of ${owner[$h]} too: includes cannot say which"
          bad=1
        fi
        owner[$h]=$layer
      done
    done
  done
  local line num inc
  for layer in $LAYERS; do
    local ok=" $(allowed "$layer") "
    for dir in $(layer_dirs "$root" "$layer"); do
      for f in "$root/$dir"/*.[ch]; do
        [ -e "$f" ] || continue
        while IFS=: read -r num line; do
          inc=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$line")
          inc=${inc##*/}
          [ -n "$inc" ] && [ -n "${owner[$inc]:-}" ] || continue
          case $ok in *" ${owner[$inc]} "*) continue ;; esac
          echo "$dir/${f##*/}:$num: includes $inc, a header of ${owner[$inc]}, which $layer may not"
          bad=1
        done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
      done
    done
  done
  return $bad
}

found=$(include_check "$src")
rc=$?
check "every include follows the layers' direction" "$rc" "$(printf '\n%s' "$found")"

# Self-test: the check fails, naming file and line, on a copy with one
# violation of each rule planted.
copy="$tmp/src"
mkdir -p "$copy"
(cd "$src" && cp -r core generator runtime db lib include tuner "$copy"/) 2>/dev/null
plant() {   # FILE HEADER: a line including HEADER appended to FILE; echoes FILE:LINE
  echo "#include \"$2\"" >>"$copy/$1"
  echo "$1:$(wc -l <"$copy/$1")"
}
want=("$(plant tuner/cli.h emu.h)" "$(plant db/db.c gen.h)" "$(plant db/db_int.h backend.h)"
      "$(plant lib/fatune.c cuda_driver.h)" "$(plant lib/fatune.c cli.h)"
      "$(plant core/fa_util.h db.h)" "$(plant generator/gen.c attn_run.h)"
      "$(plant runtime/backend.c db.h)" "$(plant runtime/emu/emu.h fatune.h)"
      "$(plant tuner/output/json.h sass.h)" "$(plant tuner/analysis/sass.c trial.h)"
      "$(plant tuner/trial/trial.c cli.h)")
found=$(include_check "$copy")
rc=$?
missing=""
for w in "${want[@]}"; do grep -q "^$w: " <<<"$found" || missing="$missing $w"; done
[ "$rc" -ne 0 ] && [ -z "$missing" ] && [ "$(wc -l <<<"$found")" -eq ${#want[@]} ]
check "the check names each of ${#want[@]} planted includes by file:line" $? \
  "exit $rc, missing:$missing; found: $found"
echo "$found" | sed 's/^/      /'

if ! command -v nm >/dev/null 2>&1; then
  echo "SKIPPED: nm is not installed: the symbol checks"
  finish
  exit
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

tuner_objs=$(cd "$(dirname "$0")/../tuner" && find . -name '*.c' | sed 's|^.*/||; s|$|.o|')
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
