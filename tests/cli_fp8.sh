#!/usr/bin/env bash
# cli_fp8.sh: fp8 (e4m3) through the command line. The wg family's fp8
# space on sm_90a (FlashAttention-3's fp8 tiles, deferred normalization
# only), the reasons it refuses the rest, the main job on the emulator
# (every default variant validated against float64 under two schedules and
# the adversarial suite, with random descales of Q, K and V; with
# --descale-rows, descales per block of rows), what `best`
# then says, `explore --axis quant` (the rounding against float64, with
# and without the Hadamard rotation), `fatune run` on e4m3 .npy files, and
# `fatune model` rating the fp8 kernel by its QGMMA at fp8's rate (last:
# SKIPPED without nvdisasm).
#
# usage: FATUNE=build/fatune bash tests/cli_fp8.sh
set -u

NAME=cli_fp8
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"

# --- the space ------------------------------------------------------------------
run l list --dim 128 --dtype e4m3 --arch sm_90a
[ "$rc" -eq 0 ] && head -n 1 "$tmp/l.out" | grep -q '^wg-e4m3-d128-m128n224c2-deferred-np-sq-s2-sw128 ' &&
  ! grep -qv '^wg-e4m3-d128-' "$tmp/l.out" && ! grep -q 'norm=eager' "$tmp/l.out"
check "list --dtype e4m3 on sm_90a: wg's fp8, FA3's 128x224 first, no eager" $? \
  "exit $rc: $(head -n 3 "$tmp/l.out") $(cat "$tmp/l.err")"
run names list --dim 128 --dtype fp8 --arch sm_90a
[ "$rc" -eq 0 ] && cmp -s "$tmp/l.out" "$tmp/names.out"
check "--dtype fp8 is e4m3" $? "exit $rc: $(cat "$tmp/names.err")"
refused eager "eager's P / l" gen --config family=wg,norm=eager --dim 128 --dtype e4m3 --arch sm_90a
refused bn "multiple of 32" gen --config family=wg,block_n=176 --dim 128 --dtype e4m3 --arch sm_90a
run sm80 --dim 64 --seq 64 --dtype e4m3 --arch sm_80 --backend emu
[ "$rc" -eq 2 ] && tail -n 1 "$tmp/sm80.err" | grep -q 'no family computes op fwd in e4m3 on sm_80' &&
  ! grep -q 'the  family' "$tmp/sm80.err"
check "the main job for e4m3 on sm_80 (no wgmma): no family, said once" $? "exit $rc: $(cat "$tmp/sm80.err")"
run g gen --variant wg-e4m3-d128-m128n224c2-deferred-np-ov-s2-sw128 --arch sm_90a
[ "$rc" -eq 0 ] && grep -q 'fa_wgmma_ss_e4m3(224, s' "$tmp/g.out" &&
  grep -q 'fa_wgmma_rs_e4m3(128, o, pa\[6\]' "$tmp/g.out" &&
  grep -q 'wg_e4m3_d128_m128n224c2_deferred_np_ov_s2_sw128_vt' "$tmp/g.out"
check "gen: S and P V by k32 e4m3 wgmma (7 steps of P V over 224 keys), V transposed first" $? \
  "exit $rc: $(cat "$tmp/g.err")"

# --- the main job on the emulator ---------------------------------------------------
run tune --dim 64 --seq 96 --seq-k 150 --causal --dtype e4m3 --backend emu --arch sm_90a \
  --batch 1 --heads 2 --db "$tmp/f8.db" --seed 7
ok=$(grep -c '^wg-e4m3-d64-.* ok ' "$tmp/tune.out")
[ "$rc" -eq 0 ] && [ "$ok" -ge 8 ] && ! grep -q '^wg-.* \(invalid\|crashed\|timeout\) ' "$tmp/tune.out"
check "the main job: every fp8 default variant valid, suite included ($ok)" $? \
  "exit $rc: $(tail -n 5 "$tmp/tune.out") $(tail -n 3 "$tmp/tune.err")"
# O's error is fp8's (P in e4m3: a few percent), within its 2^-4, never bf16's.
awk '/^wg-e4m3-d64-.* ok / { if ($3 < 0.005 || $3 > 0.0625) bad++ } END { exit bad > 0 }' "$tmp/tune.out"
check "O's norm-relative error between 5e-3 and 2^-4 for every variant" $? \
  "$(grep '^wg-e4m3' "$tmp/tune.out" | awk '{print $1, $3}' | head -n 4)"
run best best --dim 64 --seq 96 --seq-k 150 --causal --dtype e4m3 --db "$tmp/f8.db"
[ "$rc" -eq 0 ] && grep -q 'wg-e4m3-d64-' "$tmp/best.out"
check "best --dtype e4m3 names the recorded fp8 variant" $? "exit $rc: $(cat "$tmp/best.out" "$tmp/best.err")"

# Descales per block of 64 rows (wg's blockscale form): FA3's tile and the
# overlapped persistent one, over 2 blocks of Q and 7 of K/V in 3 K/V
# blocks of the kernel (O's accumulator moves between their V descales);
# the rest of the space the emulator validates in test_lib_fp8 and the
# main job alike.
for cfg in "family=wg" "family=wg,block_m=128,consumers=2,block_n=160,overlap=1,persistent=1"; do
  run bs --dim 64 --seq 96 --seq-k 400 --causal --dtype e4m3 --backend emu --arch sm_90a \
    --batch 1 --heads 2 --db "$tmp/bs.db" --seed 7 --descale-rows 64 --config "$cfg"
  [ "$rc" -eq 0 ] && grep -q '^wg-e4m3-d64-.*-blockscale  *ok .* ok ' "$tmp/bs.out" &&
    awk '/^wg-e4m3-d64-.* ok / { if ($3 < 0.005 || $3 > 0.0625) bad++ } END { exit bad > 0 }' \
      "$tmp/bs.out"
  check "--descale-rows 64 ($cfg): the blockscale variant valid, suite included" $? \
    "exit $rc: $(tail -n 3 "$tmp/bs.out") $(tail -n 3 "$tmp/bs.err")"
done
refused bs96 "no power of two" --dim 64 --seq 96 --dtype e4m3 --arch sm_90a --backend emu \
  --descale-rows 96
refused bsbf "it takes --dtype e4m3" --dim 64 --seq 96 --dtype bf16 --arch sm_90a --backend emu \
  --descale-rows 64
refused bsmod "not with one (masks only)" gen --dim 64 --dtype e4m3 --arch sm_90a --descale-rows 64 \
  --mod softcap=30 --config family=wg
refused bsvl "dense forward pass's" list --dim 64 --dtype e4m3 --arch sm_90a --descale-rows 64 \
  --varlen
# As with --varlen and --paged, the problem's form is the variant's: a name
# tuned per head runs per block.
run bsname gen --variant wg-e4m3-d64-m128n160c2-deferred-np-sq-s2-sw64 --arch sm_90a --descale-rows 64
[ "$rc" -eq 0 ] && grep -q 'bs_factors(p.ws' "$tmp/bsname.out"
check "gen --variant NAME --descale-rows 64: NAME's blockscale form" $? "exit $rc: $(cat "$tmp/bsname.err")"

# --- explore --axis quant: the rounding against float64 -------------------------------
run quant explore --dim 64 --seq 128 --axis quant --seed 3 --json
read -r bf pt rot obf opt orot rpt rblk < <(python3 - "$tmp/quant.out" <<'PY' 2>/dev/null
import json, sys
def key(s):
    return "rot" if "rotated" in s else "blk" if "per block" in s else s.split(",")[0]
r = {(x["inputs"], key(x["scheme"])): x["rel_err"] for x in json.load(open(sys.argv[1]))}
print(*(r[(i, s)] for i in ("normal", "outliers") for s in ("bf16", "e4m3", "rot")),
      r[("ranged", "e4m3")], r[("ranged", "blk")])
PY
)
[ "$rc" -eq 0 ] && [ -n "$orot" ] &&
  awk -v bf="$bf" -v pt="$pt" -v obf="$obf" -v opt="$opt" -v orot="$orot" \
    'BEGIN { exit !(bf < 0.01 && pt > 3 * bf && pt < 0.125 && orot < opt && opt > 3 * obf) }'
check "explore --axis quant: fp8 well past bf16, the rotation cuts it with outliers ($opt -> $orot)" \
  $? "exit $rc: $(head -c 600 "$tmp/quant.out") $(tail -n 2 "$tmp/quant.err")"
# A block of queries 10^5 times the rest: one scale per head leaves the
# rest among e4m3's smallest values; a scale per block of 64 rows does not.
[ -n "$rblk" ] && awk -v a="$rpt" -v b="$rblk" 'BEGIN { exit !(b < 0.125 && a > 4 * b) }'
check "explore --axis quant: scales per block keep the ordinary rows of a ranged Q ($rpt -> $rblk)" \
  $? "$(head -c 900 "$tmp/quant.out")"
run q96 explore --dim 96 --seq 64 --axis quant
[ "$rc" -eq 2 ] && tail -n 1 "$tmp/q96.err" | grep -q 'power of 2'
check "explore --axis quant refuses a head dim the rotation cannot take" $? "exit $rc: $(cat "$tmp/q96.err")"

# --- run on .npy files ----------------------------------------------------------------
# e4m3 as np.save writes an ml_dtypes.float8_e4m3fn array ('<V1') or NumPy's
# own 1-byte void ('|V1'); O back as bfloat16 ('<V2'), checked by a naive
# attention in Python floats on the inputs as stored (no NumPy needed).
if command -v python3 >/dev/null 2>&1; then
  cat >"$tmp/f8npy.py" <<'PY'
import math, random, struct, sys

def e4m3(b):
    s = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 15, b & 7
    return s * (2.0 ** -6 * m / 8 if e == 0 else 2.0 ** (e - 7) * (1 + m / 8))

def save(path, descr, shape, data):
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + data)

def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<H", data[8:10])[0]
    h = eval(data[10:10 + n].decode())
    return h["descr"], tuple(h["shape"]), data[10 + n:]

if sys.argv[1] == "write":   # write PATH DESCR SEED D0 D1 D2 D3: finite values 2^-3 to 3.75
    rnd = random.Random(int(sys.argv[4]))
    shape = [int(x) for x in sys.argv[5:]]
    n = math.prod(shape)
    save(sys.argv[2], sys.argv[3], shape,
         bytes(rnd.randrange(2) << 7 | rnd.randrange(4, 10) << 3 | rnd.randrange(8)
               for _ in range(n)))
    sys.exit(0)
# check Q K V O LSE: causal, bottom-right; O's norm-relative error, lse's largest
(_, (B, H, N, D), q), (_, ks, k), (_, _, v) = (load(p) for p in sys.argv[2:5])
od, os_, o = load(sys.argv[5])
ld, ls, lse = load(sys.argv[6])
if od != "<V2" or os_ != (B, H, N, D) or ld != "<f4" or ls != (B, H, N):
    print("O %s %s, lse %s %s" % (od, os_, ld, ls))
    sys.exit(1)
M = ks[2]
o = [struct.unpack("<f", struct.pack("<I", x << 16))[0]
     for x in struct.unpack("<%dH" % (len(o) // 2), o)]
lse = struct.unpack("<%df" % (len(lse) // 4), lse)
e2 = r2 = lerr = 0.0
for bh in range(B * H):
    for i in range(N):
        qi = [e4m3(x) for x in q[(bh * N + i) * D:(bh * N + i + 1) * D]]
        keys = range(min(M, i + M - N + 1))
        s = [sum(a * e4m3(b) for a, b in zip(qi, k[(bh * M + j) * D:(bh * M + j + 1) * D]))
             / math.sqrt(D) for j in keys]
        mx = max(s)
        p = [math.exp(x - mx) for x in s]
        l = sum(p)
        lerr = max(lerr, abs(lse[bh * N + i] - (mx + math.log(l))))
        for d in range(D):
            r = sum(p[j] * e4m3(v[(bh * M + j) * D + d]) for j in keys) / l
            e2 += (o[(bh * N + i) * D + d] - r) ** 2
            r2 += r * r
print("rel_err %.5f lse_err %.3g" % (math.sqrt(e2 / r2), lerr))
PY
  f8="python3 $tmp/f8npy.py"
  $f8 write "$tmp/q8.npy" '|V1' 1 1 2 40 64 && $f8 write "$tmp/k8.npy" '<V1' 2 1 2 70 64 &&
    $f8 write "$tmp/v8.npy" '<V1' 3 1 2 70 64
  run r8 run --backend emu --arch sm_90a --config family=wg --causal --q "$tmp/q8.npy" \
    --k "$tmp/k8.npy" --v "$tmp/v8.npy" --out "$tmp/o8.npy" --lse "$tmp/l8.npy"
  [ "$rc" -eq 0 ] && grep -q 'ran wg-e4m3-d64-' "$tmp/r8.err"
  check "run on '|V1' and '<V1' inputs runs wg's e4m3 kernel" $? \
    "exit $rc: $(head -c 400 "$tmp/r8.err")"
  out=$($f8 check "$tmp/q8.npy" "$tmp/k8.npy" "$tmp/v8.npy" "$tmp/o8.npy" "$tmp/l8.npy")
  ok=$?
  [ "$ok" -eq 0 ] && python3 -c "import sys; e, l = float('$out'.split()[1]), float('$out'.split()[3]); sys.exit(0 if 1e-3 < e <= 2 ** -4 and l < 1e-2 else 1)"
  check "run e4m3: O written as bfloat16 ('<V2') within 2^-4 of naive attention, lse fp32 ($out)" $? \
    "$out"
  refused r8arch "give --arch sm_90a" run --backend emu --config family=wg --q "$tmp/q8.npy" \
    --k "$tmp/k8.npy" --v "$tmp/v8.npy" --out "$tmp/o8.npy"
  refused r8dt "the inputs are float8_e4m3fn (e4m3)" run --backend emu --arch sm_90a \
    --dtype fp16 --config family=wg --q "$tmp/q8.npy" --k "$tmp/k8.npy" --v "$tmp/v8.npy" \
    --out "$tmp/o8.npy"
  refused r8ds "takes no descales" run --backend emu --arch sm_90a --config family=wg \
    --descale-rows 64 --q "$tmp/q8.npy" --k "$tmp/k8.npy" --v "$tmp/v8.npy" --out "$tmp/o8.npy"
  refused r8bwd "e4m3 (fp8) has no backward pass" run --op bwd --backend emu --arch sm_90a \
    --config family=wg --q "$tmp/q8.npy" --k "$tmp/k8.npy" --v "$tmp/v8.npy" \
    --do "$tmp/q8.npy" --dq "$tmp/dq8.npy" --dk "$tmp/dk8.npy" --dv "$tmp/dv8.npy"
else
  echo "SKIPPED the run checks: no python3"
fi

# --- the timing model ---------------------------------------------------------------
run m model --gpu h100 --dim 128 --seq 16384 --batch 1 --heads 16 --dtype e4m3 \
  --variant wg-e4m3-d128-m128n224c2-deferred-np-ov-s2-sw128
if grep -q "nvdisasm" "$tmp/m.err"; then
  echo "SKIPPED: no nvdisasm for the model ($passed passed, $failed failed so far)"
  [ "$failed" -eq 0 ] && exit 77
  finish
  exit
fi
[ "$rc" -eq 0 ] && grep -q 'of the e4m3 peak, 1979' "$tmp/m.out" &&
  grep -q 'main loop per K/V block per warp: [0-9]* instructions, 11 QGMMA' "$tmp/m.out"
check "model: 11 QGMMA per K/V block (4 of S, 7 of P V) against fp8's 1979 TFLOP/s" $? \
  "exit $rc: $(cat "$tmp/m.out" "$tmp/m.err")"
tf=$(sed -n 's/.*predicted [0-9.]* us, \([0-9]*\) TFLOP\/s.*/\1/p' "$tmp/m.out")
[ -n "$tf" ] && [ "$tf" -gt 989 ] && [ "$tf" -le 1979 ]
check "model: fp8 predicted above bf16's peak (989) and within fp8's ($tf TFLOP/s)" $? \
  "$(cat "$tmp/m.out")"

finish
