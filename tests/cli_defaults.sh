#!/usr/bin/env bash
# cli_defaults.sh: the defaults a user gets without asking. The dtype is
# the target's (bf16 on sm_80 and newer, fp32 below) and the main job's
# banner says which family and why; keys left out of --config take values
# that fit the keys given and say so; run takes its dtype from the .npy
# inputs (bfloat16 as ml_dtypes saves it, '<V2'), refuses a --dtype that
# contradicts them and asks for one when they disagree.
#
# usage: FATUNE=build/fatune bash tests/cli_defaults.sh
set -u

NAME=cli_defaults
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"

run() {
  local name=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
  rc=$?
}

# --- the dtype follows the target ---------------------------------------------
run l90 list --dim 64 --arch sm_90
[ "$rc" -eq 0 ] && ! grep -qv '^tc-bf16-' "$tmp/l90.out" && [ -s "$tmp/l90.out" ]
check "list on sm_90 without --dtype: bf16 tensor-core variants only" $? \
  "exit $rc: $(head -n 2 "$tmp/l90.out")"
run l75 list --dim 64 --arch sm_75
[ "$rc" -eq 0 ] && ! grep -qv '^simt-f32-' "$tmp/l75.out" && [ -s "$tmp/l75.out" ]
check "list on sm_75 without --dtype: fp32 CUDA-core variants only" $? \
  "exit $rc: $(head -n 2 "$tmp/l75.out")"
run l90f list --dim 64 --arch sm_90 --dtype fp32
[ "$rc" -eq 0 ] && ! grep -qv '^simt-f32-' "$tmp/l90f.out"
check "list on sm_90 with --dtype fp32: the CUDA-core family, as asked" $? "exit $rc"

# The banner comes before any work: the first lines of a main job stopped
# as soon as it said them.
banner "$tmp/banner.err" --dim 32 --seq 64 --backend emu --arch sm_80 --db "$tmp/b.db"
grep -q '^fatune: dtype bf16, the tc family (tensor cores): sm_80 has bf16 tensor cores' \
  "$tmp/banner.err"
check "main job banner names bf16, the tc family and why" $? "$(head -n 4 "$tmp/banner.err")"

banner "$tmp/b90a.err" --dim 32 --seq 64 --backend emu --arch sm_90a --db "$tmp/b.db"
grep -q '^fatune: dtype bf16, the wg and tc families (.*the best of both wins)' "$tmp/b90a.err"
check "main job banner on sm_90a names the wg and tc families" $? "$(head -n 4 "$tmp/b90a.err")"

# --variant without --dtype: the variant's dtype, not the target's pick
run vd --variant tc-f16-d32-m64n64w4-deferred-swizzle-qsmem-s2 --dim 32 --seq 64 --backend emu \
  --arch sm_80 --db "$tmp/vd.db"
[ "$rc" -eq 0 ] && grep -q "^fatune: dtype fp16, .*: the variant's name says so" "$tmp/vd.err"
check "--variant tc-f16-... without --dtype runs fp16, as the name says" $? \
  "exit $rc: $(head -n 4 "$tmp/vd.err")"

# --- the main job on the backward pass: recorded under op bwd, apart from fwd ------
run mbwd --op bwd --config block_m=16,block_n=32 --dtype fp32 --dim 16 --seq 40 --causal \
  --backend emu --db "$tmp/bwd.db"
[ "$rc" -eq 0 ] && grep -q "^simtbwd-f32-d16-m16n32w4-dqpass-causal .* ok " "$tmp/mbwd.out" &&
  grep -q "simtbwd family" "$tmp/mbwd.err"
check "main job --op bwd validates a simtbwd variant on the emulator" $? \
  "exit $rc: $(head -c 400 "$tmp/mbwd.out") $(tail -c 300 "$tmp/mbwd.err")"
run bbwd best --op bwd --dtype fp32 --dim 16 --seq 40 --causal --db "$tmp/bwd.db"
run bfwd best --dtype fp32 --dim 16 --seq 40 --causal --db "$tmp/bwd.db"
[ "$rc" -ne 0 ] && grep -q "^variant *simtbwd-f32-d16-m16n32w4-dqpass-causal" "$tmp/bbwd.out"
check "best --op bwd finds it; best (fwd) finds nothing" $? \
  "$(head -c 200 "$tmp/bbwd.out") / exit $rc $(head -c 200 "$tmp/bfwd.err")"

# --- --config: keys left out fit the keys given ---------------------------------
run cfg gen --config block_m=2,block_n=2 --dtype fp32
[ "$rc" -eq 0 ] && grep -q 'simt-f32-d64-m2n2w2-' "$tmp/cfg.out" &&
  grep -q 'took warps=2, not the default warps=4 (split_q needs a row per warp' "$tmp/cfg.err"
check "gen --config block_m=2,block_n=2: warps=2, and it says so" $? \
  "exit $rc: $(head -c 300 "$tmp/cfg.err")"
run cfg4 gen --config block_m=2,block_n=2 --arch sm_90
[ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/cfg4.err")" -eq 1 ] &&
  grep -q "(for bf16, the dtype chosen for sm_90; --dtype fp32 for the SIMT family)" "$tmp/cfg4.err"
check "gen --config of a SIMT tile without --dtype: one line naming the dtype chosen and --dtype fp32" $? \
  "exit $rc: $(head -c 300 "$tmp/cfg4.err")"
run cfg2 gen --config block_m=64 --dtype fp32
[ "$rc" -eq 0 ] && [ ! -s "$tmp/cfg2.err" ]
check "gen --config whose defaults fit: no note" $? "$(head -c 300 "$tmp/cfg2.err")"
run cfg3 gen --config block_m=2,warps=4 --dtype fp32
[ "$rc" -eq 2 ] && grep -q 'split_q needs a row per warp' "$tmp/cfg3.err"
check "gen --config block_m=2,warps=4: a key given is never changed, one line, exit 2" $? \
  "exit $rc: $(head -c 300 "$tmp/cfg3.err")"

# --- run: the dtype of the inputs ------------------------------------------------
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIPPED the run checks: no python3"
  finish
  exit $?
fi
tool="python3 $(dirname "$0")/npy_tool.py"
for t in q k v; do
  $tool write "$tmp/${t}h.npy" f2 11 24 32
  $tool write "$tmp/${t}b.npy" V2 12 24 32
  $tool write "$tmp/${t}f.npy" f4 13 24 32
done
cfg='block_m=64,block_n=32'
run rh run --backend emu --config "$cfg" --q "$tmp/qh.npy" --k "$tmp/kh.npy" --v "$tmp/vh.npy" \
  --out "$tmp/oh.npy"
[ "$rc" -eq 0 ] && grep -q 'ran tc-f16-d32-' "$tmp/rh.err"
check "run with float16 inputs and no --dtype runs the fp16 tensor-core kernel" $? \
  "exit $rc: $(head -c 300 "$tmp/rh.err")"
run rb run --backend emu --config "$cfg" --q "$tmp/qb.npy" --k "$tmp/kb.npy" --v "$tmp/vb.npy" \
  --out "$tmp/ob.npy" --lse "$tmp/lb.npy"
[ "$rc" -eq 0 ] && grep -q 'ran tc-bf16-d32-' "$tmp/rb.err"
check "run with bfloat16 ('<V2') inputs runs the bf16 kernel" $? \
  "exit $rc: $(head -c 300 "$tmp/rb.err")"
out=$($tool check "$tmp/qb.npy" "$tmp/kb.npy" "$tmp/vb.npy" "$tmp/ob.npy" "$tmp/lb.npy")
err=${out#max_err }; err=${err%% *}
python3 -c "import sys; sys.exit(0 if float('$err') < 2e-2 else 1)" 2>/dev/null
check "run bf16: O written as bfloat16 ('<V2'), matching naive attention on the bf16 inputs: $out" $? "$out"
out=$($tool check "$tmp/qh.npy" "$tmp/kh.npy" "$tmp/vh.npy" "$tmp/oh.npy")
rc=$?
err=${out#max_err }; err=${err%% *}
[ $rc -eq 0 ] && python3 -c "import sys; sys.exit(0 if float('$err') < 5e-3 else 1)" 2>/dev/null
check "run fp16: O written as float16 ('<f2'), matching naive attention: $out" $? "$out"
run rm run --backend emu --config "$cfg" --dtype fp32 --q "$tmp/qh.npy" --k "$tmp/kh.npy" \
  --v "$tmp/vh.npy" --out "$tmp/om.npy"
[ "$rc" -eq 2 ] && grep -q -- '--dtype fp32, but the inputs are float16 (fp16)' "$tmp/rm.err" &&
  [ ! -e "$tmp/om.npy" ]
check "run --dtype fp32 on float16 inputs: refused, one line, exit 2" $? \
  "exit $rc: $(head -c 300 "$tmp/rm.err")"
run rx run --backend emu --config "$cfg" --q "$tmp/qh.npy" --k "$tmp/kf.npy" --v "$tmp/vh.npy" \
  --out "$tmp/ox.npy"
[ "$rc" -eq 2 ] && grep -q 'the inputs differ in dtype (q float16, k float32, v float16)' "$tmp/rx.err"
check "run on inputs of several dtypes without --dtype: asks for one, exit 2" $? \
  "exit $rc: $(head -c 300 "$tmp/rx.err")"
run rxd run --backend emu --config "$cfg" --dtype fp16 --q "$tmp/qh.npy" --k "$tmp/kf.npy" \
  --v "$tmp/vh.npy" --out "$tmp/oxd.npy"
[ "$rc" -eq 0 ] && $tool check "$tmp/qh.npy" "$tmp/kf.npy" "$tmp/vh.npy" "$tmp/oxd.npy" >/dev/null
check "run on inputs of several dtypes with --dtype fp16: runs, O in float16" $? \
  "exit $rc: $(head -c 300 "$tmp/rxd.err")"

finish
