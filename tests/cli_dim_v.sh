#!/usr/bin/env bash
# cli_dim_v.sh: V's head dim apart from Q's and K's (--dim 192 --dim-v
# 128) through the command line: names that say both dims, the main job
# on the emulator recording them under their own key (best and show tell
# 48/24 from 48), the backward pass, run on .npy tensors whose V is
# narrower or wider than Q (forward and backward), and bad values refused
# in one line.
#
# usage: FATUNE=build/fatune bash tests/cli_dim_v.sh
set -u

NAME=cli_dim_v
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"

run() {
  local name=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
  rc=$?
}

# --- names and listings -------------------------------------------------------
run l list --dim 192 --dim-v 128 --dtype fp32
[ "$rc" -eq 0 ] && [ -s "$tmp/l.out" ] && ! grep -qv '^simt-f32-d192v128-.* dim=192 dim_v=128 ' "$tmp/l.out"
check "list --dim 192 --dim-v 128: every name says d192v128, every config dim_v=128" $? \
  "exit $rc: $(head -n 2 "$tmp/l.out")"
run same list --dim 64 --dim-v 64 --dtype fp32
run plain list --dim 64 --dtype fp32
[ "$rc" -eq 0 ] && cmp -s "$tmp/same.out" "$tmp/plain.out" && ! grep -q 'dim_v' "$tmp/plain.out"
check "--dim-v equal to --dim is the same listing as without it, no dim_v key" $? "exit $rc"

run mla list --dim 576 --dim-v 512 --dtype fp16 --arch sm_80
[ "$rc" -eq 0 ] && [ -s "$tmp/mla.out" ] && ! grep -qv '^simt-f16-d576v512-' "$tmp/mla.out"
check "list --dim 576 --dim-v 512 (DeepSeek's MLA) fp16 on sm_80: CUDA-core variants" $? \
  "exit $rc: $(head -n 2 "$tmp/mla.out") $(cat "$tmp/mla.err")"
run big list --dim 577 --dtype fp32
[ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/big.err")" -eq 1 ] && grep -q -- '--dim must be an integer from 1 to 576' "$tmp/big.err"
check "--dim 577: refused in one line (head dims 1 to 576)" $? "exit $rc: $(cat "$tmp/big.err")"
for bad in 0 577 x; do
  run bad$bad list --dim 64 --dim-v "$bad"
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/bad$bad.err")" -eq 1 ] && grep -q -- '--dim-v' "$tmp/bad$bad.err"
  check "--dim-v $bad: exit 2, one line naming --dim-v" $? "exit $rc: $(cat "$tmp/bad$bad.err")"
done

# --- the main job, best and show ----------------------------------------------
run tune --dim 48 --dim-v 24 --seq 40 --seq-k 56 --dtype fp32 --causal --backend emu \
  --config block_m=16,block_n=16 --db "$tmp/r.db"
[ "$rc" -eq 0 ] && grep -q '^simt-f32-d48v24-m16n16w4-.* ok ' "$tmp/tune.out" &&
  grep -q '^fatune: problem fp32 dim 48/24 ' "$tmp/tune.err"
check "main job --dim 48 --dim-v 24: validated ok, the banner says dim 48/24" $? \
  "exit $rc: $(head -c 400 "$tmp/tune.out") $(tail -c 300 "$tmp/tune.err")"
run best best --dim 48 --dim-v 24 --seq 40 --seq-k 56 --dtype fp32 --causal --json --db "$tmp/r.db"
[ "$rc" -eq 0 ] && grep -q '"dim": 48, "dim_v": 24,' "$tmp/best.out" &&
  grep -q '"variant": "simt-f32-d48v24-' "$tmp/best.out"
check "best --dim-v 24: the variant recorded, dim_v 24 in its JSON" $? \
  "exit $rc: $(head -c 300 "$tmp/best.out") $(cat "$tmp/best.err")"
run best0 best --dim 48 --seq 40 --seq-k 56 --dtype fp32 --causal --db "$tmp/r.db"
[ "$rc" -eq 1 ] && grep -q 'nothing recorded for fp32 dim 48 causal' "$tmp/best0.err"
check "best without --dim-v: nothing for dim 48 (48/24 is another key)" $? \
  "exit $rc: $(cat "$tmp/best0.err")"
run show show --dim-v 24 --db "$tmp/r.db"
[ "$rc" -eq 0 ] && [ "$(grep -c 'fp32 d48v24 q40 k56' "$tmp/show.out")" -eq 1 ]
check "show --dim-v 24: the trial, its problem d48v24" $? "exit $rc: $(cat "$tmp/show.out")"
run show64 show --dim-v 64 --db "$tmp/r.db"
[ "$rc" -eq 0 ] && grep -q 'no trials match' "$tmp/show64.err"
check "show --dim-v 64: none" $? "exit $rc: $(cat "$tmp/show64.err")"
run csv export --format csv --db "$tmp/r.db"
[ "$rc" -eq 0 ] && head -n 1 "$tmp/csv.out" | grep -q ',dim_v$' && tail -n 1 "$tmp/csv.out" | grep -q ',24$'
check "export --format csv: a dim_v column, 24" $? "exit $rc: $(tail -n 1 "$tmp/csv.out")"

run tbwd --op bwd --dim 40 --dim-v 72 --seq 33 --seq-k 50 --dtype fp16 --causal --backend emu \
  --arch sm_80 --config block_m=64,block_n=64 --db "$tmp/r.db"
[ "$rc" -eq 0 ] && grep -q '^tcbwd-f16-d40v72-m64n64.* ok ' "$tmp/tbwd.out"
check "main job --op bwd --dim 40 --dim-v 72 fp16: a tensor-core backward variant, ok" $? \
  "exit $rc: $(head -c 400 "$tmp/tbwd.out") $(tail -c 300 "$tmp/tbwd.err")"

# --- run on .npy tensors -------------------------------------------------------
if command -v python3 >/dev/null 2>&1; then
  tool="python3 $(dirname "$0")/npy_tool.py"
  for dv in 5 19; do
    $tool write "$tmp/q$dv.npy" f8 1 2 3 17 12 && $tool write "$tmp/k$dv.npy" f8 2 2 3 23 12 &&
      $tool write "$tmp/v$dv.npy" f8 3 2 3 23 "$dv"
    run run$dv run --config block_m=16,block_n=16 --causal --q "$tmp/q$dv.npy" --k "$tmp/k$dv.npy" --v "$tmp/v$dv.npy" \
      --out "$tmp/o$dv.npy" --lse "$tmp/l$dv.npy" --backend emu
    out=$($tool check "$tmp/q$dv.npy" "$tmp/k$dv.npy" "$tmp/v$dv.npy" "$tmp/o$dv.npy" "$tmp/l$dv.npy" --causal)
    st=$?
    [ "$rc" -eq 0 ] && [ "$st" -eq 0 ] &&
      awk '{ exit !($2 < 1e-12 && $4 < 1e-6) }' <<<"$out"
    check "run, V of head dim $dv beside Q's 12 (fp64): O shaped (2, 3, 17, $dv) matches naive attention" $? \
      "exit $rc: $out $(cat "$tmp/run$dv.err")"
  done
  # The backward pass, the forward pass run first: dV of V's width.
  $tool write "$tmp/do5.npy" f8 4 2 3 17 5
  run bwd5 run --op bwd --config block_m=16,block_n=16 --causal --q "$tmp/q5.npy" \
    --k "$tmp/k5.npy" --v "$tmp/v5.npy" --do "$tmp/do5.npy" --dq "$tmp/dq5.npy" \
    --dk "$tmp/dk5.npy" --dv "$tmp/dv5.npy" --backend emu
  out=$($tool grad "$tmp/q5.npy" "$tmp/k5.npy" "$tmp/v5.npy" "$tmp/do5.npy" "$tmp/dq5.npy" \
    "$tmp/dk5.npy" "$tmp/dv5.npy" --causal)
  st=$?
  [ "$rc" -eq 0 ] && [ "$st" -eq 0 ] && grep -q 'simtbwd-f64-d12v5-' "$tmp/bwd5.err" &&
    python3 -c "import sys; e=[float(x) for x in '$out'.split()[1::2]]; sys.exit(0 if len(e) == 3 and max(e) < 1e-12 else 1)"
  check "run --op bwd, V of head dim 5 beside Q's 12 (fp64): dQ, dK, dV (2, 3, 23, 5) match" $? \
    "exit $rc: $out $(tail -c 300 "$tmp/bwd5.err")"
  $tool write "$tmp/dobad.npy" f8 4 2 3 17 12
  run bwdbad run --op bwd --config block_m=16 --q "$tmp/q5.npy" --k "$tmp/k5.npy" \
    --v "$tmp/v5.npy" --do "$tmp/dobad.npy" --dq "$tmp/x1.npy" --dk "$tmp/x2.npy" --dv "$tmp/x3.npy" --backend emu
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/bwdbad.err")" -eq 1 ] && grep -q "dO is shaped as Q, with V's head dim" "$tmp/bwdbad.err"
  check "run --op bwd with dO of Q's width, not V's: refused in one line" $? "exit $rc: $(cat "$tmp/bwdbad.err")"
  $tool write "$tmp/vbad.npy" f8 3 2 3 22 5
  run runbad run --config block_m=16,block_n=16 --q "$tmp/q5.npy" --k "$tmp/k5.npy" --v "$tmp/vbad.npy" --out "$tmp/ob.npy" --backend emu
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/runbad.err")" -eq 1 ] && grep -q 'shapes do not match' "$tmp/runbad.err" &&
    [ ! -e "$tmp/ob.npy" ]
  check "run with V of 22 rows against K's 23: refused in one line, nothing written" $? \
    "exit $rc: $(cat "$tmp/runbad.err")"
else
  echo "SKIP  run on .npy (no python3)"
fi

finish
