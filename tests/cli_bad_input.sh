#!/usr/bin/env bash
# cli_bad_input.sh: every bad input makes fatune exit with status 2, print
# nothing on stdout and exactly one non-empty line on stderr, starting with
# "fatune: " and naming the problem (the bad value or flag). No crash, no hang.
#
# usage: FATUNE=build/fatune bash tests/cli_bad_input.sh
set -u

NAME=cli_bad_input
. "$(dirname "$0")/cli_lib.sh"

# bad "NEEDLE1|NEEDLE2|..." ARGS...
# Every needle must appear in the message.
bad() {
  local needles=$1
  shift
  local label="fatune $*"
  local why=""
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  local first
  first=$(head -n 1 "$tmp/err")
  if [ "$rc" -eq 124 ] && [ ${#TIMEOUT[@]} -gt 0 ]; then
    why="hung (killed after 60 s)"
  elif [ "$rc" -ge 128 ]; then
    why="crashed: exit $rc (signal $((rc - 128)))"
  elif [ "$rc" -ne 2 ]; then
    why="exit status $rc, want 2"
  elif [ -s "$tmp/out" ]; then
    why="stdout not empty: $(head -c 200 "$tmp/out")"
  elif [ ! -s "$tmp/err" ]; then
    why="stderr empty"
  elif [ "$lines" -ne 1 ] || [ "$(tail -c 1 "$tmp/err" | od -An -tx1 | tr -d ' ')" != "0a" ]; then
    why="stderr is not exactly one line: $(head -c 400 "$tmp/err")"
  elif [[ "$first" != "fatune: "?* ]]; then
    why="stderr does not start with 'fatune: ': $first"
  else
    local IFS='|'
    local n
    for n in $needles; do
      if [[ "$first" != *"$n"* ]]; then
        why="message does not name '$n': $first"
        break
      fi
    done
  fi
  if [ -z "$why" ]; then pass "$(printf '%-60s %s' "$label" "$first")"
  else fail "$(printf '%-60s' "$label")" "$why"; fi
}

# What the brief asks for.
bad "--bogus"                      --bogus
bad "frobnicate"                   frobnicate
bad "--dim|0"                      --dim 0
bad "--dim|577"                    --dim 577
bad "--dim|abc"                    --dim abc
bad "--dim"                        --dim
bad "fp7"                          --dtype fp7
bad "sm_12"                        --arch sm_12
bad "bogus"                        --arch bogus
bad "newer NVRTC|sm_150|newest it knows is sm_" --arch sm_150
bad "nope"                         gen --variant nope
bad "simt-f32-d64-m64n32w4-deferred-qouter-splitq-pad-qsmem-extra" \
  gen --variant 'simt-f32-d64-m64n32w4-deferred-qouter-splitq-pad-qsmem-extra'
bad "block_m"                      gen --config 'block_m'
bad "block_m|0"                    gen --config 'block_m=0'
bad "colour"                       gen --config 'colour=blue'
bad "norm|lazy"                    gen --config 'norm=lazy'
bad "--variant|--config"           gen
bad "--variant|--config"           gen --variant simt-f32-d64-m64n32w4-deferred-qouter-splitq-pad-qsmem \
                                       --config 'block_m=64'
bad "--variant|list"               list --variant x
bad "huge"                         compile --space huge
bad "--seq|0"                      --seq 0
bad "--jobs|0"                     --jobs 0

# A few more of the same kind.
bad "--dim|-5"                     --dim -5
bad "--dim|64abc"                  --dim 64abc
bad "--dim|1e2"                    --dim 1e2
bad "--dtype"                      list --dtype
bad "--seq-k|0"                    --seq-k 0
bad "--batch|0"                    --batch 0
bad "--heads|abc"                  --heads abc
bad "--smem|10"                    --smem 10
bad "--dim must be an integer"     --dim=0
bad "extra"                        list --dim 64 extra
bad "block_m|twice"                gen --config 'block_m=4,block_m=8'
bad "wmma"                         gen --config 'family=wmma'
bad "split_k"                      gen --dtype fp32 --config 'split=split_k,warps=1'
bad "sm_80"                        gen --dim 256 --arch sm_80 --config 'block_m=256,block_n=256'
bad "--space"                      compile --dim 4 --space

# Backends, seeds and the emulator's flags.
bad "gpu"                          --backend gpu
bad "--emu-seq|0"                  --emu-seq 0
bad "--seed|-1"                    --seed -1
bad "--seed|x"                     --seed x
bad "--scale|0"                    --scale 0
bad "--scale|nan"                  --scale nan
bad "--emu-seq|compile"            compile --emu-seq 4

# run: flags, files and shapes.
printf 'not an array' >"$tmp/junk.npy"
py() { python3 "$(dirname "$0")/npy_tool.py" "$@"; }
bad "--q|--out"                    run --config 'block_m=4'
bad "--variant|--config"           run --q a.npy --k b.npy --v c.npy --out o.npy
bad "sideways"                     run --schedule sideways
bad "--dim|run"                    run --dim 4
bad "missing.npy"                  run --config 'block_m=4' --q "$tmp/missing.npy" --k x --v x --out "$tmp/o.npy"
bad "junk.npy|magic"               run --config 'block_m=4' --q "$tmp/junk.npy" --k x --v x --out "$tmp/o.npy"
if command -v python3 >/dev/null 2>&1; then
  py write "$tmp/q.npy" f4 1 10 8 && py write "$tmp/k.npy" f4 2 12 8 && py write "$tmp/v.npy" f4 3 12 8
  py write "$tmp/v11.npy" f4 3 11 8 && py write "$tmp/q3.npy" f4 4 2 10 8 && py write "$tmp/k300.npy" f4 4 300 8
  bad "shapes do not match"        run --config 'block_m=4' --q "$tmp/q.npy" --k "$tmp/k.npy" --v "$tmp/v11.npy" --out "$tmp/o.npy"
  bad "q3.npy|(2, 10, 8)"          run --config 'block_m=4' --q "$tmp/q3.npy" --k "$tmp/k.npy" --v "$tmp/v.npy" --out "$tmp/o.npy"
  bad "is for dim 64|dim 8"        run --variant simt-f32-d64-m64n32w4-deferred-qouter-splitq-pad-qsmem \
                                     --q "$tmp/q.npy" --k "$tmp/k.npy" --v "$tmp/v.npy" --out "$tmp/o.npy"
  bad "causal"                     run --variant simt-f32-d8-m8n8w1-deferred-qouter-splitq-pad-qsmem \
                                     --causal --q "$tmp/q.npy" --k "$tmp/k.npy" --v "$tmp/v.npy" --out "$tmp/o.npy"
  [ ! -e "$tmp/o.npy" ] && pass "no output file is left by a run that failed" ||
    fail "no output file is left by a run that failed" "$tmp/o.npy exists"
fi

# --- database commands ---
bad "--dim|--seq"                  best
bad "--dim|--seq"                  best --dim 64
bad "--batch|best"                 best --dim 64 --seq 128 --batch 2
bad "--arch|best"                  best --dim 64 --seq 128 --arch sm_90
bad "--format|csv|json"            export
bad "xml"                          export --format xml
bad "--format|show"                show --format csv
bad "--device|list"                list --device x
bad "merge|path"                   merge
bad "--dim|0"                      show --dim 0

# --- SASS ---
: >"$tmp/afile"
bad "--save-cubin|afile|not a directory" compile --arch sm_80 --dtype fp32 --config 'block_m=64' --save-cubin "$tmp/afile"
bad "--save-cubin|nodir"           compile --arch sm_80 --dtype fp32 --config 'block_m=64' --save-cubin "$tmp/nodir"
bad "v100|a100"                    compile --sass --gpu v100
bad "--variant|--config|both"      compile --variant x --config 'block_m=64'
bad "sass|cubin"                   sass
bad "--config|block_m"             sass "$tmp/afile" --config 'block_m=1'
bad "--sass|list"                  list --sass

finish
