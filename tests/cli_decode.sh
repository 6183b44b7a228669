#!/usr/bin/env bash
# cli_decode.sh: decoding over a KV cache (--op decode) through the
# command line: the family's names, a sweep over cache lengths, GQA ratios
# and page sizes on the emulator, each key recorded and found again by
# `best`, a skewed batch (--kv-lens), a recorded workload's buckets
# (--workload) and its bad files, bad problems refused in one line, a
# decoding kernel under a modification (--mod), the forward pass's paged form for prefill (--paged in list, gen and model),
# and `fatune model --op decode` (SKIPPED without nvdisasm): the splits
# side by side with FlashAttention-2's heuristic, the tuned choice (the
# model's best of 1 to 128) never behind it and far ahead on a skewed batch;
# FlashAttention-2's own decoding kernels (tests/data/fa) at its heuristic's
# splits, near HBM's bandwidth where the splits fill the GPU, their tile
# by the number of splits, and what it does not run refused.
#
# usage: FATUNE=build/fatune bash tests/cli_decode.sh
set -u

NAME=cli_decode
TIMEOUT_S=600
. "$(dirname "$0")/cli_lib.sh"
db="$tmp/d.db"

# --- names ---------------------------------------------------------------------
run l list --op decode --dim 128 --dtype bf16 --gqa 8 --seq-k 4096
[ "$rc" -eq 0 ] && ! grep -qvE '^(simtdec-bf16-d128-r[28]n[0-9]*w4-|tcdec-bf16-d128-n[0-9]*w4-s)' "$tmp/l.out" &&
  grep -q '^simtdec-bf16-d128-r8n64w4-cpasync-s16 ' "$tmp/l.out" &&
  grep -q '^simtdec-bf16-d128-r2n32w4-s1 ' "$tmp/l.out" &&
  grep -q '^tcdec-bf16-d128-n128w4-s32 ' "$tmp/l.out"
check "list --op decode --gqa 8: tcdec's and simtdec's (the group's 8 rows and 2, sync and cp.async), splits" $? \
  "exit $rc: $(head -n 3 "$tmp/l.out") $(cat "$tmp/l.err")"

# --- bad problems ----------------------------------------------------------------
refused page "--page is --op decode's" --dim 64 --page 16
refused gqa_fwd "--gqa is --op decode's" --dim 64 --gqa 2
refused gqa_div "does not divide --heads 16" --op decode --dim 64 --gqa 3
refused lists "are the main job's sweeps of --op decode" --dim 64 --batch 1,2
refused lens_batch "sets the batch" --op decode --dim 64 --kv-lens 10,20 --batch 2
refused lens_bad "comma-separated list of key counts" --op decode --dim 64 --kv-lens 10,x
refused lens_fwd "--kv-lens is --op decode's" --dim 64 --kv-lens 10,20
refused seqs "takes one --seq" --op decode --dim 64 --seq 1,2
refused model_fa2_page "pages of a multiple of 256" model --op decode --gpu h100 --dim 128 --page 16 \
  --cubin x.cubin --launch fa2

# --- a sweep on the emulator -------------------------------------------------------
cfg='rows=1,block_n=8,warps=1,splits=2'
run sweep --op decode --dim 16 --dtype fp32 --heads 4 --batch 2 --seq-k 20,45 --gqa 1,2 \
  --page 3,16 --config "$cfg" --backend emu --db "$db" --seed 7
[ "$rc" -eq 0 ] && grep -q 'sweep: 8 keys, 0 failed' "$tmp/sweep.err" &&
  grep -q 'key 8/8: fp32 dim 16 seq_q 1 seq_k 45 batch 2 gqa 2 page 16' "$tmp/sweep.err"
check "a sweep of 2 lengths x 2 GQA ratios x 2 page sizes: 8 keys, each validated" $? \
  "exit $rc: $(grep -E 'sweep|invalid|key 8' "$tmp/sweep.err" | head -n 4)"
run best best --op decode --dim 16 --dtype fp32 --seq 1 --seq-k 45 --batch 2 --gqa 2 --page 3 --db "$db" --json
[ "$rc" -eq 0 ] && python3 -c '
import json, sys
b = json.load(open(sys.argv[1]))
assert b["variant"] == "simtdec-f32-d16-r1n8w1-s2" and b["page"] == 3 and b["kv_group"] == 2, b
' "$tmp/best.out" 2>"$tmp/best.py"
check "best --op decode finds the key (gqa 2, page 3, batch 2, 45 keys)" $? \
  "exit $rc: $(cat "$tmp/best.out" "$tmp/best.err" "$tmp/best.py" | head -n 4)"
run nobest best --op decode --dim 16 --dtype fp32 --seq 1 --seq-k 45 --batch 2 --gqa 2 --page 5 --db "$db"
[ "$rc" -ne 0 ] && grep -q 'nothing recorded' "$tmp/nobest.err"
check "best --op decode at a page size never tuned: nothing recorded" $? \
  "exit $rc: $(cat "$tmp/nobest.out" "$tmp/nobest.err" | head -n 3)"
run near best --op decode --dim 16 --dtype fp32 --seq 1 --seq-k 45 --batch 5 --gqa 2 --page 3 --db "$db"
[ "$rc" -eq 0 ] && grep -q 'no exact entry for .* batch 5; nearest tuned: .* batch 2' "$tmp/near.err" &&
  grep -q 'simtdec-f32-d16-r1n8w1-s2' "$tmp/near.out"
check "best --op decode at a batch never tuned: the nearest batch's, and says so" $? \
  "exit $rc: $(cat "$tmp/near.out" "$tmp/near.err" | head -n 3)"

# --- a recorded workload: its steps' buckets are the sweep's keys -----------------
printf '# decode steps\n30,7,12\n\n20, 1, 33  # a comment\n5,5,5,5,5\n17,2,9\n' >"$tmp/wl.txt"
run wl --op decode --dim 16 --dtype fp32 --heads 4 --gqa 2 --workload "$tmp/wl.txt" --backend emu \
  --db "$tmp/wl.db" --config 'family=simtdec,rows=2,block_n=8,warps=1,splits=2'
[ "$rc" -eq 0 ] && grep -q 'fatune: sweep: 3 keys' "$tmp/wl.err" &&
  grep -q 'workload .*wl.txt: 4 decode steps in 3 buckets: batch 4 x 32 keys (2), batch 4 x 64 keys (1), batch 8 x 8 keys (1)' "$tmp/wl.err" &&
  grep -q 'key 3/3: fp32 dim 16 seq_q 1 seq_k 8 batch 8 gqa 2 page 0' "$tmp/wl.err"
check "--workload: 4 steps in 3 (batch, length) buckets, each a key tuned" $? \
  "exit $rc: $(grep -E 'sweep|workload|key' "$tmp/wl.err" | head -n 5)"
printf '1,2\n3,x\n' >"$tmp/wlbad.txt"
refused wl_bad "wlbad.txt:2: want a length (digits), not 'x'" --op decode --dim 16 --workload "$tmp/wlbad.txt"
: >"$tmp/wlempty.txt"
refused wl_empty "no decode steps" --op decode --dim 16 --workload "$tmp/wlempty.txt"
printf '1,%s\n' 16777217 >"$tmp/wlbig.txt"
refused wl_big "wlbig.txt:1: a length over 16777216" --op decode --dim 16 --workload "$tmp/wlbig.txt"
refused wl_fwd "--workload is --op decode's" --dim 16 --workload "$tmp/wl.txt"
refused wl_batch "--workload sets the batches" --op decode --dim 16 --workload "$tmp/wl.txt" --batch 2

run skew --op decode --dim 16 --dtype fp16 --heads 4 --gqa 4 --kv-lens 33,0,1,20 --page 4 \
  --config 'family=simtdec,rows=4,block_n=8,warps=1,splits=3' --backend emu --db "$db" --seed 8
[ "$rc" -eq 0 ] && grep -q 'batch 4' "$tmp/skew.err" && grep -q ' ok ' "$tmp/skew.out"
check "--kv-lens 33,0,1,20: a skewed batch, its lengths validated as given (simtdec)" $? \
  "exit $rc: $(cat "$tmp/skew.err" | tail -n 3)"

run tc --op decode --dim 32 --dtype bf16 --heads 8 --gqa 4 --seq 2 --causal --kv-lens 40,0,1,17 \
  --page 5 --config 'family=tcdec,block_n=32,warps=2,splits=2' --backend emu --db "$db" --seed 9
[ "$rc" -eq 0 ] && grep -q '^tcdec-bf16-d32-n32w2-s2-causal .* ok ' "$tmp/tc.out"
check "tcdec on a skewed batch of 2 new tokens, GQA 4, pages of 5: validated" $? \
  "exit $rc: $(tail -n 3 "$tmp/tc.err") $(cat "$tmp/tc.out")"

# --- prefill: the forward pass's paged form -------------------------------------------
run pl list --dim 64 --dtype bf16 --arch sm_80 --paged
[ "$rc" -eq 0 ] && [ -s "$tmp/pl.out" ] && ! grep -qv -- '-paged ' "$tmp/pl.out" &&
  grep -q '^tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2-paged ' "$tmp/pl.out" &&
  ! grep -q 'carry' "$tmp/pl.out"
check "list --paged: tc's paged forms, none carrying K/V addresses" $? \
  "exit $rc: $(head -n 3 "$tmp/pl.out") $(cat "$tmp/pl.err")"
run pg gen --config family=tc --dim 128 --dtype bf16 --causal --paged
[ "$rc" -eq 0 ] && grep -q 'FA_TC_KERNEL_OF(tc_bf16_d128_[a-z0-9_]*_causal_paged, 128, pv)' "$tmp/pg.out" &&
  grep -q 'p.block_table' "$tmp/pg.out" && grep -q 'kv_page\[0\]' "$tmp/pg.out"
check "gen --paged: the kernel reads K/V through the block table" $? "exit $rc: $(cat "$tmp/pg.err")"
refused paged_bwd "--paged is the forward pass's" gen --dim 64 --op bwd --paged --config family=tcbwd
refused paged_varlen "--paged is the forward pass's" compile --dim 64 --varlen --paged
run dmod --op decode --dim 32 --dtype bf16 --heads 8 --gqa 4 --kv-lens 90,0,1,40 --page 5 \
  --mod window=8 --config 'family=tcdec,block_n=16,warps=1,splits=2' --backend emu --db "$db" --seed 10
[ "$rc" -eq 0 ] && grep -q 'mod window=8:0' "$tmp/dmod.err" && grep -q '^tcdec-bf16-d32-n16w1-s2 .* ok ' "$tmp/dmod.out"
check "--op decode --mod window=8: the decoding kernel under the window, validated" $? \
  "exit $rc: $(tail -n 3 "$tmp/dmod.err") $(cat "$tmp/dmod.out")"
run pc gen --config family=tc,kv_addr=carry --dim 64 --dtype bf16 --paged
[ "$rc" -ne 0 ] && grep -q 'kv_addr=rebuild' "$tmp/pc.err"
check "gen --paged with kv_addr=carry: refused, saying why" $? "exit $rc: $(cat "$tmp/pc.err")"
# wg's form (sm_90a): TMA boxes of page_rows rows on their pages
run wl list --dim 64 --dtype bf16 --arch sm_90a --paged
[ "$rc" -eq 0 ] && grep -q '^wg-bf16-d64-m192n192c3-deferred-np-sq-s2-sw128-paged ' "$tmp/wl.out" &&
  grep -q '^wg-bf16-d64-m192n192c3-deferred-np-sq-s2-sw128-paged-pr64 ' "$tmp/wl.out" &&
  ! grep -q -- '-pers' "$tmp/wl.out"
check "list --arch sm_90a --paged: wg's paged forms, boxes of 16 and 64 rows, none persistent" $? \
  "exit $rc: $(head -n 3 "$tmp/wl.out") $(cat "$tmp/wl.err")"
run wg gen --config family=wg,page_rows=64 --dim 64 --dtype bf16 --arch sm_90a --paged
[ "$rc" -eq 0 ] && grep -q 'FA_SM90_KERNEL_OF(wg_bf16_d64_[a-z0-9_]*_paged_pr64, 512, pv)' "$tmp/wg.out" &&
  grep -q 'fa_shfl_idx_i32' "$tmp/wg.out" && grep -q 'pv.tmap\[4\]' "$tmp/wg.out"
check "gen --paged, wg in boxes of 64 rows: pages through the table, a row at a time where a sequence ends" $? \
  "exit $rc: $(cat "$tmp/wg.err")"
run wr gen --config family=wg,page_rows=64 --dim 64 --dtype bf16 --arch sm_90a
[ "$rc" -ne 0 ] && grep -q "page_rows is the KV cache form's" "$tmp/wr.err"
check "gen page_rows=64 without --paged: refused, saying why" $? "exit $rc: $(cat "$tmp/wr.err")"
run wp gen --config family=wg,persistent=1 --dim 128 --dtype bf16 --arch sm_90a --paged
[ "$rc" -ne 0 ] && grep -q 'persistent=0' "$tmp/wp.err"
check "gen --paged, wg persistent: refused, saying why" $? "exit $rc: $(cat "$tmp/wp.err")"

# --- the model ----------------------------------------------------------------------
run probe model --op decode --gpu h100 --dim 128 --dtype bf16 --variant simtdec-bf16-d128-r1n64w4-cpasync-s1
if grep -q "needs nvdisasm" "$tmp/probe.err"; then
  echo "SKIPPED: no nvdisasm for the model ($passed passed, $failed failed so far)"
  [ "$failed" -eq 0 ] || exit 1
  exit 77
fi
run model model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --page 16 \
  --kv-lens 32768,512,512,512,512,512,512,512 --variant simtdec-bf16-d128-r1n64w4-cpasync-s1 --json
[ "$rc" -eq 0 ] && python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
tuned = [r for r in rows if r["best"]]
fa2 = [r for r in rows if r["fa2_heuristic"]]
assert len(tuned) == 1 and len(fa2) == 1, rows
assert [r["splits"] for r in rows] == sorted(r["splits"] for r in rows), rows
assert all(0 < r["hbm_share"] <= 1.0 for r in rows), rows
# the heuristic sees batch 8 x 32 heads as a full GPU: one split, the 32k
# sequence alone on 32 CTAs; the tuned splits are several times faster
assert fa2[0]["splits"] == 1 and fa2[0]["time_us"] > 3 * tuned[0]["time_us"], (fa2, tuned)
' "$tmp/model.out" 2>"$tmp/model.py"
check "model --op decode, a skewed batch: FA2's heuristic at 1 split, the tuned splits >3x faster" $? \
  "exit $rc: $(cat "$tmp/model.err" "$tmp/model.py" | tail -n 4)"
run gqa model --op decode --gpu a100 --dim 128 --dtype bf16 --heads 32 --gqa 8 --batch 1 \
  --seq-k 16384 --variant simtdec-bf16-d128-r8n64w4-cpasync-s1 --json
[ "$rc" -eq 0 ] && python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
tuned = next(r for r in rows if r["best"])
fa2 = next(r for r in rows if r["fa2_heuristic"])
assert tuned["time_us"] <= fa2["time_us"], (tuned, fa2)
' "$tmp/gqa.out" 2>"$tmp/gqa.py"
check "model --op decode, GQA 8 on A100: the tuned splits no slower than the heuristic's" $? \
  "exit $rc: $(cat "$tmp/gqa.err" "$tmp/gqa.py" | tail -n 4)"
run tcm model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --gqa 8 --batch 1 \
  --seq-k 32768 --page 1 --variant tcdec-bf16-d128-n64w4-s1 --json
[ "$rc" -eq 0 ] && python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
tuned = next(r for r in rows if r["best"])
assert tuned["hbm_share"] >= 0.85, tuned
' "$tmp/tcm.out" 2>"$tmp/tcm.py"
check "model: tcdec, GQA 8, 32k keys, pages of 1 on H100: the tuned splits at 85% of HBM or more" $? \
  "exit $rc: $(cat "$tmp/tcm.err" "$tmp/tcm.py" | tail -n 4)"
run pm model --gpu a100 --dim 64 --dtype bf16 --seq 2048 --batch 8 --heads 16 --causal --paged \
  --variant tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2-causal-paged --json
[ "$rc" -eq 0 ] && python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["kernel"].endswith("-paged") and r["tflops"] > 100, r
' "$tmp/pm.out" 2>"$tmp/pm.py"
check "model --paged, causal: the paged form's main loop found and predicted" $? \
  "exit $rc: $(cat "$tmp/pm.err" "$tmp/pm.py" | tail -n 4)"

# FlashAttention-2's decoding kernels: flash_fwd_splitkv_kernel, 64 x 128
# with more than one split (the batch of one sequence: 7 splits on an
# H100), 64 x 64 from the other file with one (batch 64); each DRAM-bound.
data="$(cd "$(dirname "$0")" && pwd)/data/fa"
for f in fa2_split_d128_sm_90 fa2_split_align_d128_sm_90; do gzip -dc "$data/$f.cubin.gz" >"$tmp/$f.cubin"; done
run fa2s model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --batch 1 --seq-k 32768 \
  --cubin "$tmp/fa2_split_d128_sm_90.cubin" --launch fa2 --json
run fa2a model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --batch 64 --seq-k 4096 \
  --cubin "$tmp/fa2_split_align_d128_sm_90.cubin" --launch fa2 --json
why=$(python3 - "$tmp/fa2s.out" "$tmp/fa2a.out" <<'EOF' 2>&1
import json, sys
s, a = (json.load(open(f)) for f in sys.argv[1:])
assert len(s) == 1 and len(a) == 1, (s, a)
s, a = s[0], a[0]
assert s["fa2_heuristic"] and s["splits"] == 7 and s["combine_us"] > 0, s
assert a["fa2_heuristic"] and a["splits"] == 1 and a["combine_us"] == 0, a
assert s["bound"] == "DRAM" and s["hbm_share"] >= 0.9, s
assert a["bound"] == "DRAM" and a["hbm_share"] >= 0.9, a
print("7 splits %.1f us, %.0f%% of HBM; 1 split %.1f us, %.0f%%" % (
    s["time_us"], 100 * s["hbm_share"], a["time_us"], 100 * a["hbm_share"]))
EOF
)
check "model --op decode --launch fa2: FlashAttention-2's kernels at its heuristic's splits: $why" $? \
  "$(cat "$tmp/fa2s.err" "$tmp/fa2a.err" | tail -n 2) $why"
# At d64 and d256 the tiles differ (64 x 256 and 64 x 64 with splits, 64 x
# 128 and 64 x 64 without): the launch names the instantiation it runs.
for f in fa2_split_d64_sm_80 fa2_split_d256_sm_90 fa2_split_align_d256_sm_90; do
  gzip -dc "$data/$f.cubin.gz" >"$tmp/$f.cubin"
done
run fa2s64 model --op decode --gpu a100 --dim 64 --dtype bf16 --heads 32 --batch 1 --seq-k 32768 \
  --cubin "$tmp/fa2_split_d64_sm_80.cubin" --launch fa2 --json
run fa2s256 model --op decode --gpu h100 --dim 256 --dtype bf16 --heads 32 --batch 1 --seq-k 32768 \
  --cubin "$tmp/fa2_split_d256_sm_90.cubin" --launch fa2 --json
run fa2a256 model --op decode --gpu h100 --dim 256 --dtype bf16 --heads 32 --batch 64 --seq-k 4096 \
  --cubin "$tmp/fa2_split_align_d256_sm_90.cubin" --launch fa2 --json
why=$(python3 - "$tmp/fa2s64.out" "$tmp/fa2s256.out" "$tmp/fa2a256.out" <<'EOF' 2>&1
import json, sys
s64, s256, a256 = (json.load(open(f))[0] for f in sys.argv[1:])
for r, tile in ((s64, "ILi64ELi64ELi256ELi4E"), (s256, "ILi256ELi64ELi64ELi4E"),
                (a256, "ILi256ELi64ELi64ELi4E")):
    assert tile in r["kernel"] and r["fa2_heuristic"], r
    assert r["bound"] == "DRAM" and r["hbm_share"] >= 0.85, r
assert s64["splits"] > 1 and s256["splits"] > 1 and a256["splits"] == 1, (s64, s256, a256)
print("d64 %d splits %.0f%% of HBM, d256 %d splits %.0f%%, d256 1 split %.0f%%" % (
    s64["splits"], 100 * s64["hbm_share"], s256["splits"], 100 * s256["hbm_share"],
    100 * a256["hbm_share"]))
EOF
)
check "model --op decode --launch fa2 at d64 and d256: their tiles' kernels, DRAM-bound: $why" $? \
  "$(cat "$tmp/fa2s64.err" "$tmp/fa2s256.err" "$tmp/fa2a256.err" | tail -n 2) $why"
run fa2w model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --batch 64 --seq-k 4096 \
  --cubin "$tmp/fa2_split_d128_sm_90.cubin" --launch fa2
[ "$rc" -eq 2 ] && grep -q "flash_fwd_split_align_hdim128_bf16_sm80.cu" "$tmp/fa2w.err"
check "model --launch fa2 at 1 split with the split file's cubin: refused, naming the file" $? \
  "exit $rc: $(cat "$tmp/fa2w.err")"
# Four new tokens under GQA 8: FA2 packs a group's heads for one token
# alone, so its CTAs each read their K/V head (a CTA per query head);
# tcdec packs the group's 32 rows, reading each K/V head once.
run fa2g model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --gqa 8 --seq 4 \
  --seq-k 32768 --batch 1 --cubin "$tmp/fa2_split_d128_sm_90.cubin" --launch fa2 --json
run fa2m model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --seq 4 \
  --seq-k 32768 --batch 1 --cubin "$tmp/fa2_split_d128_sm_90.cubin" --launch fa2 --json
run tcg model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --gqa 8 --seq 4 \
  --seq-k 32768 --batch 1 --variant tcdec-bf16-d128-n64w4-s1 --json
why=$(python3 - "$tmp/fa2g.out" "$tmp/fa2m.out" "$tmp/tcg.out" <<'EOF' 2>&1
import json, sys
theirs = json.load(open(sys.argv[1]))[0]
mha = json.load(open(sys.argv[2]))[0]
tuned = next(r for r in json.load(open(sys.argv[3])) if r["best"])
# its CTAs and their work are those of 32 K/V heads: GQA saves it nothing
assert 0.9 < theirs["time_us"] / mha["time_us"] < 1.1, (theirs, mha)
assert theirs["time_us"] > 3 * tuned["time_us"], (theirs, tuned)
print("FA2 %.1f us (%.0f%% of HBM; %.1f without GQA), tcdec %.1f us (%.0f%%)" % (
      theirs["time_us"], 100 * theirs["hbm_share"], mha["time_us"], tuned["time_us"],
      100 * tuned["hbm_share"]))
EOF
)
check "model --op decode, 4 new tokens under GQA 8: FA2's CTA per query head >3x behind tcdec's packing: $why" \
  $? "$(cat "$tmp/fa2g.err" "$tmp/fa2m.err" "$tmp/tcg.err" | tail -n 2) $why"
# The group's 32 rows in one CTA of two m16 tiles (rows=32): the K/V
# head's blocks copied once, not by two CTAs.
run tcw model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --gqa 8 --seq 4 \
  --seq-k 32768 --batch 1 --variant tcdec-bf16-d128-m32n64w4-s1 --json
why=$(python3 - "$tmp/tcg.out" "$tmp/tcw.out" <<'EOF' 2>&1
import json, sys
narrow, wide = (next(r for r in json.load(open(f)) if r["best"]) for f in sys.argv[1:])
assert wide["time_us"] < 0.95 * narrow["time_us"], (narrow, wide)
print("m16: %.1f us (%.0f%% of HBM), m32: %.1f us (%.0f%%)" % (narrow["time_us"],
      100 * narrow["hbm_share"], wide["time_us"], 100 * wide["hbm_share"]))
EOF
)
check "model --op decode, 4 new tokens under GQA 8: tcdec's 32-row CTAs ahead of two 16-row ones: $why" \
  $? "$(cat "$tmp/tcw.err" | tail -n 2) $why"
# wg's paged form within 5% of its dense form in boxes of 16 rows, at
# FlashAttention-3's tiles (d64 with and without the mask, d128): 12 boxes
# a K or V block at d64, dealt among the producer's warps
for c in "128 m128n176c2 -" "64 m192n128c3 causal" "64 m192n192c3 -"; do
  read -r d tile m <<<"$c"
  v=wg-bf16-d$d-$tile-deferred-np-sq-s2-sw128 mask= k=$d$m
  [ "$m" = causal ] && mask=--causal v=$v-causal
  run wd$k model --gpu h100 --dim "$d" --dtype bf16 --seq 2048 --batch 8 --heads 16 $mask \
    --variant "$v" --json
  run wp$k model --gpu h100 --dim "$d" --dtype bf16 --seq 2048 --batch 8 --heads 16 $mask \
    --paged --variant "$v-paged" --json
  why=$(python3 - "$tmp/wd$k.out" "$tmp/wp$k.out" <<'EOF' 2>&1
import json, sys
dense, paged = (json.load(open(f)) for f in sys.argv[1:])
assert paged["tflops"] >= 0.95 * dense["tflops"], (dense["tflops"], paged["tflops"])
print("%.0f against %.0f TFLOP/s" % (paged["tflops"], dense["tflops"]))
EOF
)
  check "model --paged, wg d$d${mask:+ causal} on H100: within 5% of its dense form: $why" $? \
    "$(tail -n 2 "$tmp/wp$k.err") $why"
done
run fa3d model --op decode --gpu h100 --dim 128 --dtype bf16 --heads 32 --seq-k 4096 \
  --cubin "$tmp/fa2_split_d128_sm_90.cubin" --launch fa3
[ "$rc" -eq 2 ] && grep -q "FlashAttention-3's decoding is not modelled" "$tmp/fa3d.err"
check "model --launch fa3 --op decode: refused" $? "exit $rc: $(cat "$tmp/fa3d.err")"
finish
