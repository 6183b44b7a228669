#!/usr/bin/env bash
# cli_sass.sh: fatune compile --sass --save-cubin and fatune sass, end to end.
# Without nvdisasm, compile --sass says so in one line and leaves the
# figures null; with it (SKIPPED without), the cubin written by
# --save-cubin is a cubin, and fatune sass on it gives the figures compile
# --sass gave; the main job's --sass estimate of a wg variant on sm_90a
# (chain-bound without ping-pong, tensor-bound with it).
#
# usage: FATUNE=build/fatune bash tests/cli_sass.sh
set -u

NAME=cli_sass
. "$(dirname "$0")/cli_lib.sh"

config='block_m=128,block_n=128,warps=4,norm=deferred,layout=swizzle,q=smem,stages=2,q_share=0'
args=(compile --arch sm_80 --dim 64 --dtype bf16 --config "$config" --jobs 1)

# No disassembler: one line about it, the fields null, the command still ok.
FATUNE_NVDISASM="$tmp/none" "${TIMEOUT[@]}" "$FATUNE" "${args[@]}" --sass --json \
  >"$tmp/none.json" 2>"$tmp/none.err"
rc=$?
check "compile --sass without nvdisasm exits 0" "$rc" "exit $rc: $(head -c 300 "$tmp/none.err")"
n=$(grep -c "no nvdisasm" "$tmp/none.err")
[ "$n" -eq 1 ] && pass "without nvdisasm: said once" || fail "without nvdisasm: said once" "$n times"
grep -q '"loop_instructions": null' "$tmp/none.json" && grep -q '"est_tflops": null' "$tmp/none.json" &&
  pass "without nvdisasm: the SASS fields are null" ||
  fail "without nvdisasm: the SASS fields are null" "$(head -c 400 "$tmp/none.json")"

# --save-cubin writes DIR/<variant name>.cubin, an ELF file.
mkdir "$tmp/cubins"
"${TIMEOUT[@]}" "$FATUNE" "${args[@]}" --save-cubin "$tmp/cubins" >"$tmp/save.out" 2>"$tmp/save.err"
rc=$?
check "compile --save-cubin exits 0" "$rc" "exit $rc: $(head -c 300 "$tmp/save.err")"
cubin="$tmp/cubins/tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2.cubin"
[ "$(head -c 4 "$cubin" 2>/dev/null | od -An -c | tr -d ' ')" = "177ELF" ] &&
  pass "--save-cubin wrote the variant's cubin" || fail "--save-cubin wrote the variant's cubin" \
  "$(ls "$tmp/cubins")"

# compare-fa3.sh fetches nothing: without checkouts, or with a directory
# that is not one, it says what it needs in one line and exits 2.
fa3="$(dirname "$0")/../scripts/compare-fa3.sh"
bash "$fa3" >"$tmp/fa3.out" 2>"$tmp/fa3.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "downloads nothing" "$tmp/fa3.err" &&
  pass "compare-fa3.sh without checkouts: exit 2, says it downloads nothing" ||
  fail "compare-fa3.sh without checkouts: exit 2, says it downloads nothing" \
    "exit $rc: $(head -c 300 "$tmp/fa3.err")"
bash "$fa3" "$tmp" "$tmp" "$FATUNE" >"$tmp/fa3.out" 2>"$tmp/fa3.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "not a FlashAttention-3 checkout" "$tmp/fa3.err" &&
  pass "compare-fa3.sh on a directory without hopper/: exit 2, says so" ||
  fail "compare-fa3.sh on a directory without hopper/: exit 2, says so" \
    "exit $rc: $(head -c 300 "$tmp/fa3.err")"

nvdisasm_found=0
for d in ${PATH//:/ } "${CUDA_HOME:-/usr/local/cuda}/bin" /usr/local/cuda/bin; do
  [ -x "$d/nvdisasm" ] && nvdisasm_found=1
done
python3 -c 'import nvidia, os, sys
sys.exit(0 if any(os.access(os.path.join(d, s, "nvdisasm"), os.X_OK)
                  for d in nvidia.__path__ for s in ("cu13/bin", "cu12/bin", "cuda_nvdisasm/bin")) else 1)' \
  2>/dev/null && nvdisasm_found=1
if [ "$nvdisasm_found" -eq 0 ]; then
  echo "SKIPPED: no nvdisasm for the rest ($passed passed, $failed failed so far)"
  [ "$failed" -eq 0 ] && exit 77
  finish
  exit
fi

"${TIMEOUT[@]}" "$FATUNE" "${args[@]}" --sass --json >"$tmp/sass.json" 2>"$tmp/sass.err"
rc=$?
check "compile --sass exits 0" "$rc" "exit $rc: $(head -c 300 "$tmp/sass.err")"
# The tile issues 4 x 128 x 128 x 64 / 4 warps / 4096 = 256 HMMA per warp per K/V block
# for S and O, and 16 for the row sums of P (P times an n8 tile of ones).
grep -q '"loop_hmma": 272' "$tmp/sass.json" && pass "compile --sass: 256 + 16 HMMA per K/V block" ||
  fail "compile --sass: 256 + 16 HMMA per K/V block" "$(head -c 600 "$tmp/sass.json")"
"${TIMEOUT[@]}" "$FATUNE" sass "$cubin" --config 'block_m=128,block_n=128,dim=64,warps=4' \
  --json >"$tmp/file.json" 2>"$tmp/file.err"
rc=$?
check "fatune sass FILE.cubin exits 0" "$rc" "exit $rc: $(head -c 300 "$tmp/file.err")"
for f in loop_instructions loop_hmma loop_mufu loop_ldsm loop_int non_mma_per_mma; do
  a=$(grep -o "\"$f\": [0-9.]*" "$tmp/sass.json")
  b=$(grep -o "\"$f\": [0-9.]*" "$tmp/file.json")
  [ -n "$a" ] && [ "$a" = "$b" ] && pass "fatune sass agrees with compile --sass: $a" ||
    fail "fatune sass agrees with compile --sass on $f" "'$a' against '$b'"
done

# The main job's estimate of a wg variant (sm_90a): only its consumers run
# the loop; without ping-pong or overlap their GEMMs and softmax add up
# (chain-bound, under the H100's 989 TFLOP/s), with ping-pong the tensor
# pipe bounds; the TMA's DRAM ceiling comes beside, outside the bound.
wg=wg-bf16-d128-m128n176c2-deferred
for pp in np pp; do
  "${TIMEOUT[@]}" "$FATUNE" --variant "$wg-$pp-sq-s2-sw128" --dim 128 --dtype bf16 --seq 64 \
    --arch sm_90a --backend emu --sass --json --db "$tmp/wg.db" \
    >"$tmp/wg-$pp.json" 2>"$tmp/wg-$pp.err"
  rc=$?
  check "the main job --sass on $wg-$pp exits 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/wg-$pp.err")"
done
why=$(python3 - "$tmp/wg-np.json" "$tmp/wg-pp.json" <<'EOF' 2>&1
import json, sys
np_, pp = (json.load(open(f))[0] for f in sys.argv[1:])
assert np_["loop_hmma"] == 19, "HGMMA per K/V block: %r, not 8 + 11" % np_["loop_hmma"]
assert np_["bound"] == "chain" and np_["est_tflops"] < 989, "none: %r" % np_["bound"]
assert pp["bound"] == "tensor" and abs(pp["est_tflops"] - 989.4) < 0.1, \
    "ping-pong: %r %r" % (pp["bound"], pp["est_tflops"])
assert abs(np_["tma_tflops"] - 128 * 3.352) < 0.1, "TMA ceiling %r" % np_["tma_tflops"]
print("none %.0f TFLOP/s (chain), ping-pong %.0f (tensor), TMA ceiling %.0f"
      % (np_["est_tflops"], pp["est_tflops"], np_["tma_tflops"]))
EOF
)
check "the wg estimate: $why" $? "$why"

# Not a cubin: one line, exit 1.
printf 'junk' >"$tmp/junk.cubin"
"${TIMEOUT[@]}" "$FATUNE" sass "$tmp/junk.cubin" >"$tmp/junk.out" 2>"$tmp/junk.err"
rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/junk.err")" -eq 1 ] && grep -q "^fatune: " "$tmp/junk.err" &&
  pass "fatune sass on a file that is no cubin: $(cat "$tmp/junk.err")" ||
  fail "fatune sass on a file that is no cubin" "exit $rc: $(head -c 300 "$tmp/junk.err")"

finish
