#!/usr/bin/env bash
# cli_varlen.sh: variable-length batches through the command line: each
# variant's varlen form (--varlen) in list, gen and compile, the forward
# and backward passes' (the Hopper family's too), under a modification
# (tc's; wg's refused); bad problems
# refused in one line; and `fatune model --seq-lens` (SKIPPED without
# nvdisasm): a packed batch of sequences of one length at the dense
# batch's speed, forward and backward, each sequence's own work counted.
#
# usage: FATUNE=build/fatune bash tests/cli_varlen.sh
set -u

NAME=cli_varlen
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"

# --- names and source ----------------------------------------------------------------
run l list --dim 64 --dtype bf16 --arch sm_80 --varlen
[ "$rc" -eq 0 ] && [ -s "$tmp/l.out" ] && ! grep -qv -- '-varlen ' "$tmp/l.out" &&
  grep -q '^tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2-varlen ' "$tmp/l.out"
check "list --varlen: every name the varlen form" $? "exit $rc: $(head -n 3 "$tmp/l.out") $(cat "$tmp/l.err")"
run g gen --config family=tc --dim 64 --dtype bf16 --causal --varlen
[ "$rc" -eq 0 ] && grep -q 'FA_TC_KERNEL_OF(tc_bf16_d64_[a-z0-9_]*_causal_varlen, 128, pv)' "$tmp/g.out" &&
  grep -q 'pv.cu_seqlens_k' "$tmp/g.out"
check "gen --varlen: the kernel reads its sequence's offsets" $? "exit $rc: $(cat "$tmp/g.err")"
run gd gen --config family=tc --dim 64 --dtype bf16 --causal
[ "$rc" -eq 0 ] && grep -q 'FA_TC_KERNEL(tc_bf16_d64_' "$tmp/gd.out" && ! grep -q 'fa_ldg_i32(pv\.' "$tmp/gd.out"
check "gen without --varlen: the dense kernel reads no offsets" $? "exit $rc: $(cat "$tmp/gd.err")"
run c compile --dim 64 --dtype fp32 --config family=simt --varlen
[ "$rc" -eq 0 ] && grep -q 'simt-f32-d64-.*-varlen .* ok' "$tmp/c.out"
check "compile --varlen: simt's varlen form compiles" $? "exit $rc: $(tail -n 3 "$tmp/c.out") $(cat "$tmp/c.err")"
run gw gen --config family=wg,persistent=1 --arch sm_90a --dim 64 --dtype bf16 --causal --varlen
[ "$rc" -eq 0 ] && grep -q 'FA_SM90_KERNEL_OF(wg_bf16_d64_[a-z0-9_]*_pers_causal_varlen, 512, pv)' "$tmp/gw.out" &&
  grep -q '&pv.tmap\[0\], 0, vq_lo + q0, h, 0' "$tmp/gw.out" && ! grep -q 'fa_tma_store_4d(&' "$tmp/gw.out"
check "gen --varlen, wg: boxes at each sequence's tokens, O by plain stores" $? "exit $rc: $(cat "$tmp/gw.err")"
run gb gen --config family=tcbwd --op bwd --dim 64 --dtype bf16 --causal --varlen
[ "$rc" -eq 0 ] && grep -q 'FA_TC_KERNEL_OF(tcbwd_bf16_d64_[a-z0-9_]*_causal_varlen_dkdv, 256, pv)' "$tmp/gb.out" &&
  grep -q 'pv.total_q + vq_lo' "$tmp/gb.out"
check "gen --op bwd --varlen: each backward launch reads its sequence's offsets" $? "exit $rc: $(cat "$tmp/gb.err")"

run gm gen --config family=tc --dim 64 --dtype bf16 --varlen --mod window=8
[ "$rc" -eq 0 ] && grep -q 'pv.cu_seqlens_k' "$tmp/gm.out" && grep -q 'fa_mod_mask(mod_u' "$tmp/gm.out"
check "gen --varlen --mod: the varlen form under the modification" $? "exit $rc: $(cat "$tmp/gm.err")"
run wm gen --config family=wg --arch sm_90a --dim 64 --dtype bf16 --varlen --mod window=8
[ "$rc" -eq 0 ] && grep -q 'fa_mod_mask(mod_u' "$tmp/wm.out" && grep -q 'vq_lo' "$tmp/wm.out"
check "gen --varlen --mod, wg: the varlen form under the modification" $? "exit $rc: $(cat "$tmp/wm.err")"

# --- bad problems ----------------------------------------------------------------------
refused decode "--varlen is the forward and backward passes'" gen --op decode --dim 64 --dtype bf16 --varlen
refused lens_bad "comma-separated list of lengths" model --gpu a100 --dim 64 --seq-lens 10,x
refused lens_batch "sets the batch" model --gpu a100 --dim 64 --seq-lens 10,20 --batch 2
refused main "varlen" --dim 64 --varlen

# --- the model ---------------------------------------------------------------------------
v=tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2-causal
run probe model --gpu a100 --dim 64 --dtype bf16 --causal --variant $v
if grep -q "needs nvdisasm" "$tmp/probe.err"; then
  echo "SKIPPED: no nvdisasm for the model ($passed passed, $failed failed so far)"
  [ "$failed" -eq 0 ] || exit 1
  exit 77
fi
run dense model --gpu a100 --dim 64 --dtype bf16 --causal --heads 16 --seq 2048 --batch 8 --variant $v --json
run packed model --gpu a100 --dim 64 --dtype bf16 --causal --heads 16 \
  --seq-lens 2048,2048,2048,2048,2048,2048,2048,2048 --variant $v --json
run skew model --gpu a100 --dim 64 --dtype bf16 --causal --heads 16 \
  --seq-lens 4096,2048,1024,512,256,128,0,1 --variant $v
python3 -c '
import json, sys
d, p = (json.load(open(f)) for f in sys.argv[1:3])
assert p["kernel"].endswith("-varlen") and not d["kernel"].endswith("-varlen"), (d, p)
assert 0.9 <= p["tflops"] / d["tflops"] <= 1.1, (d["tflops"], p["tflops"])
' "$tmp/dense.out" "$tmp/packed.out" 2>"$tmp/m.py" &&
  grep -q '8 sequences of 4096,2048,1024,512,256,128,0,1 tokens (8065 in all, packed)' "$tmp/skew.out"
check "model --seq-lens: 8 x 2048 packed within 10% of the dense batch; a skewed batch with lengths 0 and 1" $? \
  "$(cat "$tmp/m.py" "$tmp/packed.err" "$tmp/skew.err" | tail -n 4)"
vb=tcbwd-bf16-d64-m128n128w8wn4wd2-dqatomic-causal
run bdense model --op bwd --gpu a100 --dim 64 --dtype bf16 --causal --heads 16 --seq 2048 --batch 8 --variant $vb --json
run bpacked model --op bwd --gpu a100 --dim 64 --dtype bf16 --causal --heads 16 \
  --seq-lens 2048,2048,2048,2048,2048,2048,2048,2048 --variant $vb --json
python3 -c '
import json, sys
d, p = (json.load(open(f)) for f in sys.argv[1:3])
assert p["kernel"].endswith("-varlen") and not d["kernel"].endswith("-varlen"), (d, p)
assert 0.9 <= p["tflops"] / d["tflops"] <= 1.1, (d["tflops"], p["tflops"])
' "$tmp/bdense.out" "$tmp/bpacked.out" 2>"$tmp/mb.py"
check "model --op bwd --seq-lens: 8 x 2048 packed within 10% of the dense batch" $? \
  "$(cat "$tmp/mb.py" "$tmp/bpacked.err" | tail -n 4)"
finish
