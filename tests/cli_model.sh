#!/usr/bin/env bash
# cli_model.sh: fatune model, end to end. Bad input first (one line, exit
# 2), then with nvdisasm (SKIPPED without): FlashAttention-2's and -3's own
# kernels (tests/data/fa) against the FlashAttention-3 paper's H100
# figures, FA2's backward kernels beside tcbwd's, FA3's beside wgbwd's,
# and the known cases on
# fatune's variants: the wg overlap
# variant (K and V in rings of their own) above the sequential one and
# near FA3's own kernel, its wait for P V after the exponentials; the tc
# default (row sums on the tensor cores) below its -fadd twin where the
# tensor pipe is busiest (A100); S accumulated in f16 faster on a GeForce
# part (twice the rate there) and not elsewhere; lazy rescaling's skipped
# rescale left out of the loop; a saved cubin modelled at a list of
# lengths; times measured on an H200 (tests/data/gpu) for a sample of
# fatune's variants (forward and backward) and FA2's own kernel; and
# --plot's PNG.
#
# usage: FATUNE=build/fatune bash tests/cli_model.sh
set -u

NAME=cli_model
# The main job's run compiles ten variants twice: room for a loaded machine.
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"
data="$(cd "$(dirname "$0")" && pwd)/data/fa"

# bad_input NAME ARGS...: exit 2 and one line starting "fatune: ".
bad_input() {
  local name=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" model "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  local rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] && grep -q "^fatune: " "$tmp/bad.err" &&
    pass "$name: $(cat "$tmp/bad.err")" || fail "$name" "exit $rc: $(head -c 300 "$tmp/bad.err")"
}
bad_input "no kernel" --gpu h100 --dim 128
bad_input "--cubin without --launch" --gpu h100 --dim 128 --cubin "$tmp/x.cubin"
bad_input "an unknown launch" --gpu h100 --dim 128 --cubin "$tmp/x.cubin" --launch fa9
bad_input "an unknown GPU" --gpu v100 --dim 128 --cubin "$tmp/x.cubin" --launch fa2
bad_input "a missing cubin" --gpu h100 --dim 128 --cubin "$tmp/none.cubin" --launch fa2
bad_input "both --variant and --config" --gpu h100 --variant a --config b

nvdisasm_found=0
"$FATUNE" model --gpu h100 --dim 96 --cubin "$tmp/none.cubin" --launch fa2 2>"$tmp/probe.err"
grep -q "needs nvdisasm" "$tmp/probe.err" || nvdisasm_found=1
if [ "$nvdisasm_found" -eq 0 ]; then
  echo "SKIPPED: no nvdisasm for the rest ($passed passed, $failed failed so far)"
  [ "$failed" -eq 0 ] && exit 77
  finish
  exit
fi
bad_input "a head dim without a launch table entry" --gpu h100 --dim 96 --cubin "$tmp/none.cubin" \
  --launch fa2
printf 'junk' >"$tmp/junk.cubin"
bad_input "a file that is no cubin" --gpu h100 --dim 128 --cubin "$tmp/junk.cubin" --launch fa2
for f in "$data"/*.cubin.gz; do gzip -dc "$f" >"$tmp/$(basename "$f" .gz)"; done
bad_input "a --kernel that matches nothing" --gpu h100 --dim 128 --cubin "$tmp/fa2_d128_sm_90.cubin" \
  --launch fa2 --kernel no_such_kernel
bad_input "--op bwd with FlashAttention-3's launch at a head dim it has no tile for" --op bwd \
  --gpu h100 --dim 256 --cubin "$tmp/fa3_bwd_d128_sm_90a.cubin" --launch fa3

# model GPU DIM JSON-FILE ARGS...: one prediction as JSON.
model() {
  local gpu=$1 dim=$2 out=$3
  shift 3
  "${TIMEOUT[@]}" "$FATUNE" model --gpu "$gpu" --dim "$dim" --seq 16384 --json "$@" \
    >"$out" 2>"$tmp/model.err"
  local rc=$?
  check "fatune model --gpu $gpu --dim $dim $*" "$rc" "exit $rc: $(head -c 300 "$tmp/model.err")"
}
for dim in 64 128; do
  model h100 $dim "$tmp/fa2_$dim.json" --cubin "$tmp/fa2_d${dim}_sm_90.cubin" --launch fa2
  model h100 $dim "$tmp/fa3_$dim.json" --cubin "$tmp/fa3_d${dim}_sm_90a.cubin" --launch fa3
done
# The paper's FlashAttention-2 figures (H100 SXM, bf16, 16k tokens):
# within 15%. FlashAttention-3's are not yet (the model rates it 16% above
# the paper at d128, 54% at d64; see the README): only its lead over FA2 is
# checked.
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
p = {k: json.load(open("%s/%s.json" % (d, k))) for k in ("fa2_64", "fa2_128", "fa3_64", "fa3_128")}
paper = {"fa2_64": 324, "fa2_128": 370, "fa3_64": 497, "fa3_128": 648}
for k in ("fa2_64", "fa2_128"):
    err = p[k]["tflops"] / paper[k] - 1
    assert abs(err) <= 0.15, "%s: %.0f TFLOP/s against the paper's %d" % (k, p[k]["tflops"], paper[k])
for dim in (64, 128):
    assert p["fa3_%d" % dim]["tflops"] > p["fa2_%d" % dim]["tflops"], "FA3 ahead at d%d" % dim
assert p["fa3_128"]["ex2_before_pv_wait"] > 0, "FA3 issues exponentials before its P V wait"
print(", ".join("%s %.0f (paper %d)" % (k, p[k]["tflops"], paper[k]) for k in sorted(p)))
EOF
)
check "FlashAttention's own kernels: $why" $? "$why"

# The backward pass: FlashAttention-2's own kernels (flash_bwd_dq_dk_dv_
# loop_seqk_parallel_kernel) beside tcbwd's defaults (FA2's tiles) on the
# same problems, the FLOPs 2.5 times the forward pass's. The FA3 paper's
# H100 figure for FA2's backward (d128: about 322) is not met yet (the
# model rates it about 40% low; see the README): only that tcbwd is
# within 10% of FA2 or ahead is checked, at d64 and d128 on both GPUs.
# Both add dQ in a permuted order, a warp's add one request to L2.
for gpu in a100 h100; do
  arch=sm_80
  [ "$gpu" = h100 ] && arch=sm_90
  for dim in 64 128; do
    model $gpu $dim "$tmp/bfa2_${gpu}_$dim.json" --op bwd --dtype bf16 \
      --cubin "$tmp/fa2_bwd_d${dim}_$arch.cubin" --launch fa2
    model $gpu $dim "$tmp/btc_${gpu}_$dim.json" --op bwd --dtype bf16 --config ""
  done
done
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
out = []
for gpu in ("a100", "h100"):
    for dim in (64, 128):
        f, t = (json.load(open("%s/%s_%s_%d.json" % (d, k, gpu, dim))) for k in ("bfa2", "btc"))
        flops = t["tflops"] * t["time_us"] * 1e6
        want = 2.5 * 4.0 * t["batch"] * t["heads"] * t["seq"] * t["seq_k"] * dim
        assert abs(flops / want - 1) < 1e-4, "bwd FLOPs %.4g, want %.4g" % (flops, want)  # 6 digits each
        assert t["loop_mma"] > 0 and f["loop_mma"] == t["loop_mma"], (f["loop_mma"], t["loop_mma"])
        r = t["tflops"] / f["tflops"]
        assert r >= 0.9, "%s d%d: tcbwd %.0f against FA2 %.0f" % (gpu, dim, t["tflops"], f["tflops"])
        out.append("%s d%d tcbwd %.0f / FA2 %.0f (%.2f)" % (gpu, dim, t["tflops"], f["tflops"], r))
print("; ".join(out))
EOF
)
check "the backward pass beside FlashAttention-2's: $why" $? "$why"

# FlashAttention-3's backward kernels (FlashAttnBwdSm90: two MMA
# warpgroups and a producer, Q and dO in two stages each): the model runs
# them to the end (no wait left unmet) and rates them above FA2's, as the
# FA3 paper measures (H100 bf16, 16k: FA2 291 and 322, FA3 474 and 561).
# Its figures are not checked against the paper's: the model rates FA3's
# backward far above them, as it does FA3's forward (see the README).
for dim in 64 128; do
  for causal in "" --causal; do
    model h100 $dim "$tmp/bfa3_$dim$causal.json" --op bwd --dtype bf16 $causal \
      --cubin "$tmp/fa3_bwd_d${dim}_sm_90a.cubin" --launch fa3
  done
done
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
out = []
for dim in (64, 128):
    f3 = json.load(open("%s/bfa3_%d.json" % (d, dim)))
    c3 = json.load(open("%s/bfa3_%d--causal.json" % (d, dim)))
    f2 = json.load(open("%s/bfa2_h100_%d.json" % (d, dim)))
    assert f3["loop_mma"] > 0 and f3["tflops"] > f2["tflops"], (f3["tflops"], f2["tflops"])
    assert c3["tflops"] > 0 and c3["time_us"] < f3["time_us"], (c3["time_us"], f3["time_us"])
    out.append("d%d FA3 %.0f (causal %.0f) against FA2 %.0f" % (dim, f3["tflops"], c3["tflops"],
                                                                f2["tflops"]))
print("; ".join(out))
EOF
)
check "FlashAttention-3's backward kernels: $why" $? "$why"

# wgbwd, the Hopper backward family, beside FA3's backward kernels on the
# same problem: its default (dQ over each consumer's own keys, the
# consumers only adding in turn) at least FA3's at d64 (1.03 when written)
# and d128 (1.0006), causal within 1% (d64 1.01, d128 0.999), and ahead of
# dQ over the block's keys in tiles; that
# form, where every consumer waits for the others' dS^T, gains from
# ping-pong (one's softmax under the other's products) at d128 (1.16).
for dim in 64 128; do
  model h100 $dim "$tmp/wgb_$dim.json" --op bwd --dtype bf16 --config family=wgbwd
  model h100 $dim "$tmp/wgbc_$dim.json" --op bwd --dtype bf16 --causal --config family=wgbwd
  model h100 $dim "$tmp/wgbb_$dim.json" --op bwd --dtype bf16 --config family=wgbwd,dq_split=block
done
model h100 128 "$tmp/wgbbnp_128.json" --op bwd --dtype bf16 \
  --config family=wgbwd,dq_split=block,pingpong=0
why=$(python3 - "$tmp" <<'EOF2' 2>&1
import json, sys
d = sys.argv[1]
out = []
for dim, least in ((64, 1.0), (128, 1.0)):
    w = json.load(open("%s/wgb_%d.json" % (d, dim)))
    o = json.load(open("%s/wgbb_%d.json" % (d, dim)))
    f3 = json.load(open("%s/bfa3_%d.json" % (d, dim)))
    r = w["tflops"] / f3["tflops"]
    assert w["loop_mma"] > 0 and r >= least, (dim, w["tflops"], f3["tflops"])
    assert w["tflops"] > o["tflops"], (dim, w["kernel"], w["tflops"], o["kernel"], o["tflops"])
    # causal: the Q blocks the mask reaches into in a loop of their own
    wc = json.load(open("%s/wgbc_%d.json" % (d, dim)))
    c3 = json.load(open("%s/bfa3_%d--causal.json" % (d, dim)))
    rc = wc["tflops"] / c3["tflops"]
    assert rc >= least - 0.01, (dim, wc["tflops"], c3["tflops"])
    out.append("d%d wgbwd %.0f / FA3 %.0f (%.2f; causal %.0f / %.0f, %.3f), dQ over the "
               "block's keys %.0f" % (dim, w["tflops"], f3["tflops"], r, wc["tflops"],
                                      c3["tflops"], rc, o["tflops"]))
b = json.load(open("%s/wgbb_128.json" % d))
n = json.load(open("%s/wgbbnp_128.json" % d))
assert b["tflops"] > 1.05 * n["tflops"], (b["tflops"], n["tflops"])
out.append("that at d128 without ping-pong %.0f" % n["tflops"])
print("; ".join(out))
EOF2
)
check "wgbwd beside FlashAttention-3's backward kernels: $why" $? "$why"

# dQ in a kernel of its own (dq=separate, deterministic): the model adds
# that kernel's time to the main one's; it computes S and dP again (7
# products of the tile's size where dq=atomic does 5), so it must be rated
# slower than its atomic twin.
model h100 128 "$tmp/bsep.json" --op bwd --dtype bf16 --config dq=separate
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
s, a = (json.load(open("%s/%s.json" % (d, k))) for k in ("bsep", "btc_h100_128"))
assert s["dq_kernel_us"] and 0 < s["dq_kernel_us"] < s["time_us"], s
assert a["dq_kernel_us"] is None, a
assert a["time_us"] < s["time_us"], (a["time_us"], s["time_us"])
print("dq=separate %.0f TFLOP/s (dQ's kernel %.0f%% of its time), dq=atomic %.0f" % (
    s["tflops"], 100 * s["dq_kernel_us"] / s["time_us"], a["tflops"]))
EOF
)
check "the backward pass with dQ in a kernel of its own: $why" $? "$why"

# GQA (--gqa): tcbwd runs a CTA per K/V head walking its group's query
# heads, so at 2k tokens, 32 heads in groups of 8, its 64 CTAs leave half
# of an H100's SMs idle: the model must rate it well under its MHA time;
# FlashAttention-2 keeps a CTA per query head (and sums dK and dV over the
# group after), within 5% of its own, and so does tcbwd's qhead=1 form,
# within 10%. FlashAttention-3's backward under GQA is refused, and a group
# that does not divide the heads.
for k in "tc --config dq=atomic" "tcq --config dq=atomic,qhead=1" \
         "fa2 --cubin $tmp/fa2_bwd_d128_sm_90.cubin --launch fa2"; do
  set -- $k
  for g in 1 8; do
    "${TIMEOUT[@]}" "$FATUNE" model --op bwd --gpu h100 --dim 128 --seq 2048 --batch 1 --heads 32 \
      --dtype bf16 --gqa $g --json "${@:2}" >"$tmp/gqa_$1_$g.json" 2>"$tmp/model.err"
    check "fatune model --op bwd --gqa $g $*" $? "$(head -c 300 "$tmp/model.err")"
  done
done
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
t = {(k, g): json.load(open("%s/gqa_%s_%d.json" % (d, k, g))) for k in ("tc", "tcq", "fa2")
     for g in (1, 8)}
assert t["tc", 8]["kv_group"] == 8 and t["tc", 1]["kv_group"] == 1, t["tc", 8]
assert t["tc", 8]["wave_efficiency"] < 0.6 < t["tc", 1]["wave_efficiency"], t["tc", 8]
r_tc = t["tc", 8]["time_us"] / t["tc", 1]["time_us"]
r_fa2 = t["fa2", 8]["time_us"] / t["fa2", 1]["time_us"]
assert r_tc > 1.5, "tcbwd: GQA 8 at %.2f of its MHA time" % r_tc
assert 1 <= r_fa2 < 1.05, "FA2: GQA 8 at %.2f of its MHA time" % r_fa2
r_tcq = t["tcq", 8]["time_us"] / t["tcq", 1]["time_us"]
assert 1 <= r_tcq < 1.1, "tcbwd qhead=1: GQA 8 at %.2f of its MHA time" % r_tcq
assert t["tcq", 8]["time_us"] * 1.5 < t["tc", 8]["time_us"], (t["tcq", 8], t["tc", 8])
print("tcbwd %.0f -> %.0f TFLOP/s (%.0f%% of the slots busy), qhead=1 %.0f -> %.0f, "
      "FA2 %.0f -> %.0f" % (
    t["tc", 1]["tflops"], t["tc", 8]["tflops"], 100 * t["tc", 8]["wave_efficiency"],
    t["tcq", 1]["tflops"], t["tcq", 8]["tflops"], t["fa2", 1]["tflops"], t["fa2", 8]["tflops"]))
EOF
)
check "the backward pass under GQA: $why" $? "$why"
bad_input "--gqa that does not divide --heads" --op bwd --gpu h100 --dim 128 --heads 32 \
  --gqa 3 --config ""
bad_input "--gqa that does not divide the model's 2048 / dim heads" --op bwd --gpu h100 --dim 256 \
  --gqa 16 --config ""
bad_input "FlashAttention-3's backward under GQA" --op bwd --gpu h100 --dim 128 --gqa 2 \
  --cubin "$tmp/fa3_bwd_d128_sm_90a.cubin" --launch fa3

# The main job's --op bwd --sass without a GPU: the model ranks every
# variant (tcbwd's default's prediction as fatune model's), wgbwd's first
# (h100 targets sm_90a); the static estimate, which sees one kernel,
# leaves dq=separate's out.
# Batch 1 and 16 heads: the problem fatune model takes at 16k by default.
"${TIMEOUT[@]}" "$FATUNE" --op bwd --dim 128 --seq 16384 --batch 1 --heads 16 --dtype bf16 \
  --backend emu --sass --gpu h100 --json --db "$tmp/bwd.db" >"$tmp/tbwd.json" 2>"$tmp/tbwd.err"
rc=$?
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
rows = json.load(open(d + "/tbwd.json"))
one = json.load(open(d + "/btc_h100_128.json"))
# wgbwd (sm_90a, as h100 targets) adds dQ by atomics and has no dq axis
atomic = [r for r in rows if r.get("dq", "atomic") == "atomic"]
apart = [r for r in rows if r.get("dq", "atomic") != "atomic"]
wg = [r for r in rows if r["name"].startswith("wgbwd-")]
assert atomic and apart and wg and all(r["status"] == "ok" for r in rows), [r["status"] for r in rows]
assert rows[0] in wg, "the best is %s, not a wgbwd variant" % rows[0]["name"]
assert all(r["model_tflops"] and r["model_tflops"] > 0 for r in atomic), atomic
# the static estimate takes tcbwd's single kernel, not wgbwd's warpgroups in turn
assert all(r["est_tflops"] for r in atomic if r["family"] == "tcbwd"), atomic
assert all(r["model_tflops"] and r["est_tflops"] is None and r["loop_hmma"] for r in apart), apart
assert rows == sorted(rows, key=lambda r: -r["model_tflops"]), "not ranked by the model"
dflt = [r for r in atomic if r["name"] == one["kernel"]]
assert dflt and abs(dflt[0]["model_tflops"] / one["tflops"] - 1) < 1e-6, (dflt, one["tflops"])
print("%d ranked, best %s at %.0f (tcbwd's default %.0f, as fatune model); dq=separate's best %.0f" % (
    len(rows), rows[0]["name"], rows[0]["model_tflops"], one["tflops"],
    max(r["model_tflops"] for r in apart)))
EOF
)
prc=$?
[ "$rc" -eq 0 ] && [ "$prc" -eq 0 ] && grep -q "^best by the timing model for h100 .* instructions per Q block" "$tmp/tbwd.err"
check "the main job --op bwd --sass ranks by the model: $why" $? \
  "exit $rc, $why: $(grep best "$tmp/tbwd.err")"

# Without a GPU, --gpu names the machine the main job tunes for: its arch
# is the target (before, the target stayed the space's default, sm_90,
# while the model described an A100).
v=tcbwd-bf16-d64-m128n128w8-dqatomic
"${TIMEOUT[@]}" "$FATUNE" --op bwd --dim 64 --seq 4096 --batch 1 --heads 16 --dtype bf16 \
  --backend emu --sass --gpu a100 --variant "$v" --json --db "$tmp/a100.db" \
  >"$tmp/a100.json" 2>"$tmp/a100.err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "targeting sm_80, --gpu a100's arch" "$tmp/a100.err" &&
  grep -q '"est_gpu": "a100"' "$tmp/a100.json" && grep -q "NVRTC sm_80" "$tmp/a100.err"
check "the main job without a GPU targets --gpu a100's arch, sm_80" $? \
  "exit $rc: $(head -c 600 "$tmp/a100.err")"

# The known cases, on fatune's own variants compiled now. wg's K and V
# have rings of their own (K freed after S), so the overlap variant, whose
# P V runs under the next block's softmax, is no longer starved of copies:
# it must be rated above the sequential one, near FlashAttention-3's own
# kernel, with its wait for P V after most of the exponentials (ptxas
# hoisted it above all of them before wg.cu's fa_wgmma_wait_after).
wg=wg-bf16-d128-m128n176c2-deferred-pp
model h100 128 "$tmp/ov.json" --variant "$wg-ov-s2-sw128" --plot "$tmp/ov.png"
model h100 128 "$tmp/sq.json" --variant "$wg-sq-s2-sw128"
tc=tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2
model a100 64 "$tmp/mma.json" --variant "$tc"
model a100 64 "$tmp/fadd.json" --variant "$tc-fadd"
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
j = {k: json.load(open("%s/%s.json" % (d, k))) for k in ("ov", "sq", "mma", "fadd", "fa3_128")}
assert j["ov"]["tflops"] > j["sq"]["tflops"], \
    "overlap %.0f, sequential %.0f" % (j["ov"]["tflops"], j["sq"]["tflops"])
assert j["ov"]["tflops"] >= 0.95 * j["fa3_128"]["tflops"], \
    "overlap %.0f, FA3 %.0f" % (j["ov"]["tflops"], j["fa3_128"]["tflops"])
assert j["ov"]["ex2_before_pv_wait"] >= 45, "the P V wait after %r of 90 EX2" % j["ov"]["ex2_before_pv_wait"]
assert j["mma"]["tflops"] < j["fadd"]["tflops"], \
    "rowsum=mma %.0f, -fadd %.0f" % (j["mma"]["tflops"], j["fadd"]["tflops"])
print("wg overlap %.0f > sequential %.0f TFLOP/s on h100 (FA3 %.0f), its P V wait after %d EX2; "
      "tc rowsum=mma %.0f < -fadd %.0f on a100"
      % (j["ov"]["tflops"], j["sq"]["tflops"], j["fa3_128"]["tflops"], j["ov"]["ex2_before_pv_wait"],
         j["mma"]["tflops"], j["fadd"]["tflops"]))
EOF
)
check "the known cases: $why" $? "$why"
# A precision axis: tc's S accumulated in f16 (fp16 inputs). The RTX 4090
# runs the f16-accumulating mma at twice the f32 rate, so it must be rated
# at least 15% above the same kernel with S in f32; the L40S (the same
# processor, one rate) must gain nothing from it.
t16=tc-f16-d64-m128n128w4-deferred-swizzle-qsmem-s2
for gpu in rtx4090 l40s; do
  model $gpu 64 "$tmp/s32_$gpu.json" --arch sm_89 --dtype fp16 --variant "$t16"
  model $gpu 64 "$tmp/s16_$gpu.json" --arch sm_89 --dtype fp16 --variant "$t16-sacc16"
done
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
t = lambda k, g: json.load(open("%s/%s_%s.json" % (d, k, g)))["tflops"]
r = {g: t("s16", g) / t("s32", g) for g in ("rtx4090", "l40s")}
assert r["rtx4090"] >= 1.15, "rtx4090: S in f16 %.2fx S in f32" % r["rtx4090"]
assert r["l40s"] <= 1.02, "l40s: S in f16 %.2fx S in f32" % r["l40s"]
print("tc d64 fp16, S in f16 over S in f32: rtx4090 %.2fx, l40s %.2fx" % (r["rtx4090"], r["l40s"]))
EOF
)
check "S accumulated in f16: $why" $? "$why"
# Lazy rescaling (tc's rescale=lazy): O's rescale behind a warp's vote,
# left out of the steady state, so the loop counts at least 64 fewer
# instructions per K/V block than rescaling at every block (d128: 136
# FMUL a warp and block, less the vote's own), and is rated within 10%
# of it.
tl=tc-bf16-d128-m128n64w4-deferred-swizzle-qsmem-s2-step
model a100 128 "$tmp/always.json" --variant "$tl"
model a100 128 "$tmp/lazy.json" --variant "$tl-lazy"
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
a, l = (json.load(open("%s/%s.json" % (d, k))) for k in ("always", "lazy"))
assert l["loop_instructions"] <= a["loop_instructions"] - 64, (a["loop_instructions"], l["loop_instructions"])
assert abs(l["tflops"] / a["tflops"] - 1) <= 0.1, (a["tflops"], l["tflops"])
print("tc d128 on a100: %d instructions a block rescaling always, %d lazily; %.0f and %.0f TFLOP/s"
      % (a["loop_instructions"], l["loop_instructions"], a["tflops"], l["tflops"]))
EOF
)
check "lazy rescaling: $why" $? "$why"
# The persistent scheduler: at 2k tokens per sequence under a causal
# mask, tiles are short and uneven; a CTA per tile pays each tile's Q
# load and O store and the launch order's tail. The persistent variant
# must be rated 5% above the same kernel a CTA per tile, and near FA3's
# own (persistent) kernel.
pp=wg-bf16-d128-m128n128c2-deferred-pp-ov-s2-sw128
for v in "$pp-causal" "$pp-pers-causal" fa3; do
  src=(--variant "$v")
  [ "$v" = fa3 ] && src=(--cubin "$tmp/fa3_d128_sm_90a.cubin" --launch fa3)
  "${TIMEOUT[@]}" "$FATUNE" model --gpu h100 --dim 128 --seq 2048 --causal --json "${src[@]}" \
    >"$tmp/c_$v.json" 2>"$tmp/model.err"
  check "fatune model --seq 2048 --causal $v" $? "$(head -c 300 "$tmp/model.err")"
done
why=$(python3 - "$tmp" "$pp" <<'EOF' 2>&1
import json, sys
d, pp = sys.argv[1], sys.argv[2]
one, pers, fa3 = (json.load(open("%s/c_%s.json" % (d, v)))["tflops"]
                  for v in (pp + "-causal", pp + "-pers-causal", "fa3"))
assert pers >= 1.05 * one, "persistent %.0f, a CTA per tile %.0f" % (pers, one)
assert pers >= 0.95 * fa3, "persistent %.0f, FA3 %.0f" % (pers, fa3)
print("causal d128 at 2k: persistent %.0f, a CTA per tile %.0f, FA3 %.0f TFLOP/s" % (pers, one, fa3))
EOF
)
check "wg's persistent scheduler: $why" $? "$why"
# A variant's cubin as `fatune compile --save-cubin` keeps it, modelled at
# several lengths at once: at 16k the figure of the variant compiled here.
v=$wg-ov-s2-sw128
mkdir -p "$tmp/cub"
"${TIMEOUT[@]}" "$FATUNE" compile --dim 128 --dtype bf16 --arch sm_90a --variant "$v" \
  --save-cubin "$tmp/cub" >"$tmp/compile.out" 2>&1
check "fatune compile --save-cubin $v" $? "$(tail -c 300 "$tmp/compile.out")"
"${TIMEOUT[@]}" "$FATUNE" model --gpu h100 --dim 128 --seq 2048,16384 --variant "$v" \
  --cubin "$tmp/cub/$v.cubin" --json >"$tmp/list.json" 2>"$tmp/list.err"
check "fatune model --seq 2048,16384 --variant $v --cubin" $? "$(head -c 300 "$tmp/list.err")"
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
l, ov = json.load(open(d + "/list.json")), json.load(open(d + "/ov.json"))
assert [(r["seq"], r["batch"], r["heads"]) for r in l] == [(2048, 8, 16), (16384, 1, 16)], l
assert l[1]["tflops"] == ov["tflops"], "%r against %r compiled" % (l[1]["tflops"], ov["tflops"])
assert l[0]["tflops"] < l[1]["tflops"], "2k %r, 16k %r" % (l[0]["tflops"], l[1]["tflops"])
assert l[1]["loop_mma"] == 19 and l[1]["mma"] == "HGMMA", l[1]
print("2k %.0f, 16k %.0f TFLOP/s (as compiled), %d instructions per K/V block per warp"
      % (l[0]["tflops"], l[1]["tflops"], l[1]["loop_instructions"]))
EOF
)
check "a saved cubin at two lengths: $why" $? "$why"
# Against a GPU: times measured on an H200 (tests/data/gpu), the fastest
# and a slow variant of each family at each head dim, tc's padded rows
# against its plain ones (8-way bank conflicts on each ldmatrix, 3.3 times
# slower), and FlashAttention-2's own kernel against PyTorch's flash
# backend, on the problem measured (batch 4, heads 16, seq 4096, bf16).
# Each within 25% of its time, and each pair in the measured order. The
# model reads the kernels measured, kept beside the times (NVRTC 13.0's
# cubins of the templates then): another NVRTC schedules some differently
# (the two-consumer d64 overlap variant without ping-pong: -1% under 13.0,
# +35% under 13.2), and the templates move on.
gpu_dir="$(dirname "$data")/gpu"
gpu_data="$gpu_dir/h200-fwd-bf16-s4096.csv"
sample=(wg-bf16-d128-m128n176c2-deferred-pp-ov-s2-sw128-pers wg-bf16-d128-m128n176c2-deferred-np-sq-s2-sw128
        tc-bf16-d128-m128n64w4-deferred-swizzle-qsmem-s2-step tc-bf16-d128-m64n32w4-deferred-swizzle-qsmem-s2
        wg-bf16-d64-m192n192c3-deferred-np-sq-s2-sw128 wg-bf16-d64-m128n192c2-deferred-pp-sq-s2-sw128
        tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2-carry tc-bf16-d64-m64n64w4-deferred-swizzle-qsmem-s2
        tc-bf16-d64-m128n128w4-deferred-pad-qsmem-s2 tc-bf16-d64-m128n128w4-deferred-row-qsmem-s2)
for v in "${sample[@]}" fa2_d64_sm_90 fa2_d128_sm_90; do
  case $v in
    fa2_*) dim=${v#fa2_d}; dim=${dim%_sm_90}; src=(--cubin "$tmp/$v.cubin" --launch fa2) ;;
    *) dim=${v#*-bf16-d}; dim=${dim%%-*}
       gzip -dc "$gpu_dir/$v.cubin.gz" >"$tmp/$v.cubin"
       src=(--variant "$v" --cubin "$tmp/$v.cubin") ;;
  esac
  "${TIMEOUT[@]}" "$FATUNE" model --gpu h200 --dim "$dim" --seq 4096 --batch 4 --heads 16 \
    --dtype bf16 --json "${src[@]}" >"$tmp/h200_$v.json" 2>"$tmp/model.err"
  check "fatune model --gpu h200 $v" $? "$(head -c 300 "$tmp/model.err")"
done
why=$(python3 - "$tmp" "$gpu_data" "${sample[@]}" <<'EOF' 2>&1
import csv, json, sys
d, data, sample = sys.argv[1], sys.argv[2], sys.argv[3:]
got = {}
for r in csv.DictReader(open(data)):
    key = r["kernel"] if r["source"] == "fatune" else "%s_d%s" % (r["source"], r["dim"])
    got[key] = float(r["tflops"])
pairs = [(v, v) for v in sample] + [("fa2_d%d_sm_90" % k, "torch-sdpa-flash_d%d" % k) for k in (64, 128)]
out, pred, bad = [], {}, []
for v, m in pairs:
    pred[v] = json.load(open("%s/h200_%s.json" % (d, v)))["tflops"]
    e = pred[v] / got[m] - 1
    out.append("%s %+.0f%%" % (v.replace("-deferred", "").replace("-swizzle", ""), 100 * e))
    if abs(e) > 0.25:
        bad.append("%s: model %.0f, measured %.0f TFLOP/s" % (v, pred[v], got[m]))
for a, b in zip(sample[::2], sample[1::2]):
    if pred[a] <= pred[b]:
        bad.append("measured %s ahead of %s, the model %.0f against %.0f" % (a, b, pred[a], pred[b]))
assert not bad, "; ".join(bad + out)
print("; ".join(out))
EOF
)
check "the model against an H200's times: $why" $? "$why"

# The backward pass against the same run's times: a sample of tcbwd's
# variants as measured (kept beside the times, NVRTC 13.0, the templates
# then), with dQ by atomics (L2's atomic units bound the one with 32 keys
# a CTA, 4.3e9 adds) and by a pass of its own. Those kernels added dQ a
# fragment's 8 rows at a time, 8 lines a warp's add, which --red-lines
# tells the model (today's tcbwd adds 32 consecutive floats, one line).
# Each within 20% of its time, and each pair in the measured order.
bwd_sample=(tcbwd-bf16-d128-m64n64w4wd2-dqpass tcbwd-bf16-d128-m64n64w4wd2-dqatomic
            tcbwd-bf16-d128-m64n64w4wd2-dqatomic tcbwd-bf16-d128-m64n32w2-dqatomic
            tcbwd-bf16-d64-m128n128w8-dqatomic tcbwd-bf16-d64-m64n64w4-dqatomic
            tcbwd-bf16-d64-m128n128w8-dqatomic tcbwd-bf16-d64-m64n64w4-dqpass)
for v in $(printf '%s\n' "${bwd_sample[@]}" | sort -u); do
  dim=${v#*-bf16-d}; dim=${dim%%-*}
  gzip -dc "$gpu_dir/$v.cubin.gz" >"$tmp/$v.cubin"
  "${TIMEOUT[@]}" "$FATUNE" model --op bwd --gpu h200 --dim "$dim" --seq 4096 --batch 4 --heads 16 \
    --dtype bf16 --json --variant "$v" --cubin "$tmp/$v.cubin" --red-lines 8 >"$tmp/h200_$v.json" \
    2>"$tmp/model.err"
  check "fatune model --op bwd --gpu h200 $v" $? "$(head -c 300 "$tmp/model.err")"
done
why=$(python3 - "$tmp" "$gpu_dir/h200-bwd-bf16-s4096.csv" "${bwd_sample[@]}" <<'EOF' 2>&1
import csv, json, sys
d, data, sample = sys.argv[1], sys.argv[2], sys.argv[3:]
got = {r["kernel"]: float(r["median_us"]) for r in csv.DictReader(open(data)) if r["source"] == "fatune"}
out, pred, bad = [], {}, []
for v in sorted(set(sample)):
    pred[v] = json.load(open("%s/h200_%s.json" % (d, v)))["time_us"]
    e = pred[v] / got[v] - 1
    out.append("%s %+.0f%%" % (v[len("tcbwd-bf16-"):], 100 * e))
    if abs(e) > 0.20:
        bad.append("%s: model %.0f, measured %.0f us" % (v, pred[v], got[v]))
for a, b in zip(sample[::2], sample[1::2]):
    if pred[a] >= pred[b]:
        bad.append("measured %s ahead of %s, the model %.0f against %.0f us" % (a, b, pred[a], pred[b]))
assert not bad, "; ".join(bad + out)
print("; ".join(out))
EOF
)
check "the backward model against an H200's times: $why" $? "$why"

bad_input "--launch with a fatune variant" --gpu h100 --dim 128 --variant "$v" \
  --cubin "$tmp/fa3_d128_sm_90a.cubin" --launch fa3
bad_input "a variant's name with another kernel's cubin" --gpu h100 --dim 128 --variant "$v" \
  --cubin "$tmp/fa3_d128_sm_90a.cubin"
bad_input "--plot with a list of --seq" --gpu h100 --dim 128 --seq 512,1024 \
  --cubin "$tmp/fa3_d128_sm_90a.cubin" --launch fa3 --plot "$tmp/two.png"
bad_input "a list of --dim" --gpu h100 --dim 64,128 --cubin "$tmp/fa3_d128_sm_90a.cubin" --launch fa3

[ "$(head -c 8 "$tmp/ov.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] &&
  pass "--plot drew a PNG" || fail "--plot drew a PNG" "$(ls -la "$tmp")"

# FlashAttention-3's fp8 (e4m3) forward kernels (tests/data/fa; tile_size.h's
# fp8 tiles, d128 128x224 and d256 128x128; V transposed in shared memory
# by the producer warpgroup) on the paper's problems (H100, 16k tokens, not
# causal): the launch picks the e4m3 non-causal kernel, its consumer loop
# has QGMMA (two consumer warpgroups: 4 of S and 7 of P V at d128, 8 and 4
# at d256), and the prediction is ahead of FA3's bf16 kernel at d128. The
# paper's figures (1008 and 1171 TFLOP/s) are printed beside, not checked,
# as for FA3's bf16 kernels above.
for dim in 128 256; do
  model h100 $dim "$tmp/fa3_fp8_$dim.json" --dtype e4m3 --cubin "$tmp/fa3_fp8_d${dim}_sm_90a.cubin" \
    --launch fa3
done
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
def load(name):
    try:
        return json.load(open("%s/%s.json" % (d, name)))
    except ValueError:
        sys.exit("%s: no prediction (above)" % name)
p = {dim: load("fa3_fp8_%d" % dim) for dim in (128, 256)}
bf16 = load("fa3_128")
paper = {128: 1008, 256: 1171}
for dim, j in p.items():
    assert "float_e4m3_tEfNS_4arch4Sm90ELb0E" in j["kernel"], "d%d: kernel %s" % (dim, j["kernel"][:200])
    assert j["mma"] == "QGMMA" and j["loop_mma"] == {128: 11, 256: 12}[dim], \
        "d%d: %s %s a K/V block" % (dim, j["loop_mma"], j["mma"])
assert p[128]["tflops"] > bf16["tflops"], \
    "fp8 %.0f against bf16 %.0f TFLOP/s at d128" % (p[128]["tflops"], bf16["tflops"])
print(", ".join("fp8 d%d %.0f (paper %d)" % (dim, p[dim]["tflops"], paper[dim]) for dim in sorted(p)))
EOF
)
check "FlashAttention-3's fp8 kernels: $why" $? "$why"

# wg's best fp8 variants of the default space (the README's table): at
# least FA3's own at d128 and d256.
model h100 128 "$tmp/wg_fp8_128.json" --dtype e4m3 \
  --variant wg-e4m3-d128-m128n192c2-deferred-np-ov-s4-sw128
model h100 256 "$tmp/wg_fp8_256.json" --dtype e4m3 \
  --variant wg-e4m3-d256-m128n96c2-deferred-np-ov-s3-sw128-pers
why=$(python3 - "$tmp" <<'EOF' 2>&1
import json, sys
d = sys.argv[1]
r = {}
for dim in (128, 256):
    try:
        wg, fa3 = (json.load(open("%s/%s_fp8_%d.json" % (d, k, dim))) for k in ("wg", "fa3"))
    except ValueError:
        sys.exit("d%d: no prediction (above)" % dim)
    r[dim] = wg["tflops"] / fa3["tflops"]
    assert r[dim] >= 1, "d%d: wg %.0f against FA3 %.0f TFLOP/s" % (dim, wg["tflops"], fa3["tflops"])
print(", ".join("d%d %.2fx" % (dim, r[dim]) for dim in sorted(r)))
EOF
)
check "wg's fp8 at least FlashAttention-3's in the model: $why" $? "$why"

finish
