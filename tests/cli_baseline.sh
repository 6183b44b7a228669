#!/usr/bin/env bash
# cli_baseline.sh: fatune baseline records PyTorch's times (the CSV that
# scripts/gpu-check.sh writes) in the database, TFLOP/s counted as fatune
# counts its own; a measurement of the same key again replaces it; a bad
# file (header, field, quoting, binary, size, a value no GPU measures)
# refuses the whole file in one line, exit 2, writing nothing. The report's
# figure from these rows is tests/fakecuda/fakegpu.sh's (GPU trials).
#
# usage: FATUNE=build/fatune bash tests/cli_baseline.sh
set -u

NAME=cli_baseline
. "$(dirname "$0")/cli_lib.sh"
if ! python3 -c 'import sqlite3' 2>/dev/null; then
  echo "SKIPPED: python3 with sqlite3 reads the database here"
  exit 77
fi
db="$tmp/b.db"
head='gpu,backend,dtype,batch,heads,seq_q,seq_k,dim,causal,median_us,torch'

# rows SQL: the answer of one query on the database, as python prints it.
rows() { python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchall())' "$db" "$1"; }

printf '%s\n%s\n%s\n' "$head" \
  'NVIDIA H200,sdpa-flash,bf16,4,16,4096,4096,64,0,1000.0,2.5.1' \
  'NVIDIA H200,sdpa-cudnn,bfloat16,4,16,4096,4096,64,1,800,2.5.1' >"$tmp/ok.csv"
out=$("${TIMEOUT[@]}" "$FATUNE" baseline "$tmp/ok.csv" --db "$db" 2>&1)
rc=$?
# 4 * 4 * 16 * 4096^2 * 64 FLOPs in 1000 us; causal: 4096 * 4097 / 2 pairs a head.
got=$(rows "SELECT backend, dtype, causal, round(tflops, 3) FROM baselines ORDER BY backend")
want="[('sdpa-cudnn', 'bf16', 1, $(python3 -c 'print(round(4*4*16*4096*4097/2*64/800/1e6, 3))')), ('sdpa-flash', 'bf16', 0, 274.878)]"
[ $rc -eq 0 ] && [ "$out" = "recorded 2 baselines from $tmp/ok.csv in $db" ] && [ "$got" = "$want" ]
check "two baselines recorded, TFLOP/s counted as fatune counts them" $? "exit $rc: $out; $got"

printf '%s\n%s\n' 'torch,median_us,causal,dim,seq_k,seq_q,heads,batch,dtype,backend,gpu' \
  '2.5.1,500,0,64,4096,4096,16,4,bf16,sdpa-flash,NVIDIA H200' >"$tmp/again.csv"
"${TIMEOUT[@]}" "$FATUNE" baseline "$tmp/again.csv" --db "$db" >/dev/null 2>&1
rc=$?
got=$(rows "SELECT count(*), round(max(tflops), 3) FROM baselines WHERE backend = 'sdpa-flash'")
[ $rc -eq 0 ] && [ "$got" = "[(1, 549.756)]" ]
check "columns in any order; the same key again replaces the row" $? "exit $rc: $got"

# refused NAME WANT CONTENT: the file refused in one line naming WANT, exit 2,
# the database unchanged.
refused() {
  printf '%b' "$3" >"$tmp/bad.csv"
  local err
  err=$("${TIMEOUT[@]}" "$FATUNE" baseline "$tmp/bad.csv" --db "$db" 2>&1 >/dev/null)
  rc=$?
  local n
  n=$(rows "SELECT count(*) FROM baselines")
  [ $rc -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -q -- "$2" <<<"$err" && [ "$n" = "[(2,)]" ]
  check "refused: $1" $? "exit $rc, rows $n: $err"
}
row='NVIDIA H200,sdpa-flash,bf16,4,16,4096,4096,64,0,1000,2.5.1'
refused "no header" "line 1 must be the header" "$row\n"
refused "an unknown column" "line 1 must be the header" "${head/torch/tflops}\n$row\n"
refused "an empty file" "no baselines in the file" ""
refused "a header alone" "no baselines in the file" "$head\n"
refused "a field short" "line 2: bad the number of fields" "$head\n${row%,2.5.1}\n"
refused "a quoted field" "line 3: bad the number of fields" "$head\n$row\n\"NVIDIA, H200\",sdpa,bf16,4,16,4096,4096,64,0,1000,2.5.1\n"
refused "dim not a number" "line 2: bad dim" "$head\n${row/,64,/,6x4,}\n"
refused "an unknown dtype" "line 2: bad dtype" "$head\n${row/bf16/int8}\n"
refused "a negative time" "line 2: bad median_us\|median must be a positive" "$head\n${row/1000/-5}\n"
refused "a time of no GPU (1 ps: TFLOP/s past 10000)" "row 1: baseline: TFLOP/s must be" "$head\n${row/1000/0.000001}\n"
refused "dim 0 on the second row: nothing recorded" "row 2: baseline: dim must be" "$head\n${row/sdpa-flash/sdpa-x}\n${row/,64,/,0,}\n"
refused "a backend with a space" "row 1: baseline: the backend" "$head\n${row/sdpa-flash/sdpa flash}\n"
refused "a control character in the GPU's name" "row 1: baseline: the GPU's name" "$head\nNVIDIA\001H200${row#NVIDIA H200}\n"
refused "binary data" "binary data" "$head\n\000\n"
head -c 1100000 /dev/zero | tr '\0' 'x' >"$tmp/big.csv"
err=$("${TIMEOUT[@]}" "$FATUNE" baseline "$tmp/big.csv" --db "$db" 2>&1 >/dev/null)
[ $? -eq 2 ] && grep -q "larger than 1 MB" <<<"$err"
check "refused: a file over 1 MB" $? "$err"
err=$("${TIMEOUT[@]}" "$FATUNE" baseline "$tmp/none.csv" --db "$db" 2>&1 >/dev/null)
[ $? -eq 2 ] && grep -q "cannot read .*none.csv" <<<"$err"
check "refused: a missing file" $? "$err"
err=$("${TIMEOUT[@]}" "$FATUNE" baseline --db "$db" 2>&1 >/dev/null)
[ $? -eq 2 ] && grep -q "needs the path of a CSV file" <<<"$err"
check "refused: no file named" $? "$err"
out=$("$FATUNE" help baseline)
grep -q "^usage: fatune baseline FILE.csv" <<<"$out" && grep -q "gpu,backend,dtype,batch" <<<"$out"
check "fatune help baseline: the synopsis and the header" $? "$out"
finish
