#!/usr/bin/env bash
# gpu-check.sh: the checks that need a GPU, in one go, logs in one folder.
# Uses the build in build/ when it runs here (Lua and SQLite are linked in
# statically, so a build made on another machine runs on this one), else
# builds one. Then: the GPU tests (ctest -L gpu), and the main job for dims
# 64 and 128 at seq 4096 in fp32 (as a table and as JSON) and in bf16 at
# seq 1024 to 4096, its backward pass (--op bwd) in bf16 at seq 4096 beside
# PyTorch's, next to PyTorch's scaled_dot_product_attention in the
# same run, whose times it records (fatune baseline) for fatune report's
# figure of both against seq_len; then the Python
# package: its tests (the torch ones on the GPU) and fatune.attention against
# scaled_dot_product_attention (python/tests/bench_sdpa.py). Meant to finish
# within 9 minutes on one GPU.
#
# usage: scripts/gpu-check.sh [LOG_DIR]     (default: $OUT, else gpu-logs)
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-${OUT:-gpu-logs}}
mkdir -p "$logs"
exec > >(tee "$logs/gpu-check.log") 2>&1
start=$SECONDS
say() { echo "== $* ($((SECONDS - start)) s)"; }

# NVRTC comes from the CUDA toolkit; find one if the loader cannot.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64; do
    [ -d "$d" ] && LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
  done
  export LD_LIBRARY_PATH
fi

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
nproc

if ! build/fatune --version >/dev/null 2>&1; then
  say "no usable build/fatune here: building"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j "$(nproc)" \
    || { say "build failed"; exit 1; }
fi
build/fatune --version

say "GPU tests"
(cd build && ctest -L gpu --output-on-failure --timeout 300)
tests_rc=$?

# The fake driver's tests (ctest -L fakegpu) against the real driver: with
# the fake moved aside, the loader finds the GPU's libcuda.so.1. Where the
# two disagree, the fake is wrong. Fault injection is the fake's alone:
# those parts say SKIPPED here.
say "fakegpu tests against the real driver"
fake=build/tests/fakecuda/libcuda.so.1
if [ -e "$fake" ]; then
  mv "$fake" "$fake.off"
  (cd build && ctest -L fakegpu --output-on-failure --timeout 300)
  r=$?
  mv "$fake.off" "$fake"
  [ $r -eq 0 ] || tests_rc=$r
fi

rc=$tests_rc
for dim in 64 128; do
  say "fatune --dim $dim --seq 4096 (fp32)"
  timeout 200 build/fatune --dim "$dim" --seq 4096 --dtype fp32 --backend cuda --trial-ms 150 \
    --json >"$logs/tune-d$dim.json" 2>"$logs/tune-d$dim.err"
  r=$?
  cat "$logs/tune-d$dim.err"
  [ $r -eq 0 ] || rc=$r
  python3 - "$logs/tune-d$dim.json" <<'PY' || true
import json, sys
rows = json.load(open(sys.argv[1]))
ok = [r for r in rows if r["status"] == "ok" and r.get("median_us")]
ok.sort(key=lambda r: r["median_us"])
print("%d variants, %d ok and timed" % (len(rows), len(ok)))
for r in ok[:10]:
    print("%-62s %9.1f us %7.1f TFLOP/s %6.0f GB/s  regs %3d  CTA/SM %d" % (
        r["name"], r["median_us"], r["tflops"], r["gbps"], r["registers"], r["ctas_per_sm"]))
bad = [r for r in rows if r["status"] != "ok"]
for r in bad:
    print("%s: %s: %s" % (r["status"], r["name"], r["message"]))
PY
done
# The tensor-core family, and PyTorch's own attention on the same shapes,
# side by side in this run (TFLOP/s counted the same way: 4 * B * H * N^2 * d),
# at 1024 and 2048 too, so the report draws TFLOP/s against seq_len; PyTorch's
# times go into the database (fatune baseline) beside fatune's trials.
for dim in 64 128; do
  for seq in 4096 1024 2048; do
    say "fatune --dim $dim --seq $seq --dtype bf16"
    timeout 150 build/fatune --dim "$dim" --seq "$seq" --dtype bf16 --backend cuda \
      --trial-ms "$([ "$seq" = 4096 ] && echo 150 || echo 60)" \
      >"$logs/tune-bf16-d$dim-s$seq.txt" 2>"$logs/tune-bf16-d$dim-s$seq.err" || rc=1
    tail -n 2 "$logs/tune-bf16-d$dim-s$seq.txt"
  done
  # The timing model beside every measured time (--sass: each variant's SASS
  # and the model's prediction for this GPU), and the model's error per variant.
  say "fatune --dim $dim --seq 4096 --dtype bf16 --sass --json: the model against the measurement"
  timeout 200 build/fatune --dim "$dim" --seq 4096 --dtype bf16 --backend cuda --trial-ms 60 \
    --sass --json >"$logs/model-bf16-d$dim.json" 2>"$logs/model-bf16-d$dim.err" || rc=1
  python3 - "$logs/model-bf16-d$dim.json" <<'PY' | tee "$logs/model-error-d$dim.txt" || rc=1
import json, sys
rows = json.load(open(sys.argv[1]))
print("%-58s %9s %9s %7s" % ("variant", "measured", "model", "error"))
for r in rows:
    t, m = r.get("tflops"), r.get("model_tflops")
    if t and m:
        print("%-58s %9.0f %9.0f %+6.0f%%" % (r["name"], t, m, 100 * (m / t - 1)))
PY
done
# The backward pass: the main job's --op bwd (validated on rows computed in
# float64 on the CPU, timed: D's, dK/dV's and dQ's launches together), and
# PyTorch's flash backward on the same problem, TFLOP/s counted the same
# way (10 * B * H * N^2 * d).
for dim in 64 128; do
  say "fatune --op bwd --dim $dim --seq 4096 --dtype bf16"
  timeout 200 build/fatune --op bwd --dim "$dim" --seq 4096 --dtype bf16 --backend cuda \
    --trial-ms 60 --json >"$logs/bwd-bf16-d$dim.json" 2>"$logs/bwd-bf16-d$dim.err" || rc=1
  tail -n 2 "$logs/bwd-bf16-d$dim.err"
  python3 - "$logs/bwd-bf16-d$dim.json" <<'PY' || rc=1
import json, sys
rows = json.load(open(sys.argv[1]))
for r in sorted(rows, key=lambda r: r.get("median_us") or 1e30):
    print("%-50s %-8s %8s us %7s TFLOP/s  rel_err %s  %s" % (
        r["name"], r["status"], "%.1f" % r["median_us"] if r.get("median_us") else "-",
        "%.1f" % r["tflops"] if r.get("tflops") else "-", r.get("rel_err"), r.get("message") or ""))
PY
done
say "torch: scaled_dot_product_attention's backward (flash), bf16, B 4 H 16 N 4096"
timeout 120 python3 - <<'PY' 2>&1 | tee "$logs/torch-sdpa-bwd.txt" || true
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
B, H, N = 4, 16, 4096
for d in (64, 128):
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        for _ in range(3):
            torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ms = []
        for _ in range(20):
            s.record(); torch.autograd.grad(o, (q, k, v), do, retain_graph=True); e.record()
            torch.cuda.synchronize(); ms.append(s.elapsed_time(e))
    ms.sort()
    med = ms[len(ms) // 2]
    print("sdpa flash backward d%-3d N %d median %8.1f us %7.1f TFLOP/s" % (
        d, N, med * 1e3, 10 * B * H * N * N * d / (med * 1e-3) / 1e12))
PY
say "torch.nn.functional.scaled_dot_product_attention, bf16, B 4 H 16 N 1024 to 4096"
timeout 120 python3 - "$logs/sdpa.csv" <<'PY' 2>&1 | tee "$logs/torch-sdpa.txt" || true
import sys
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
B, H = 4, 16
gpu = torch.cuda.get_device_name()
rows = ["gpu,backend,dtype,batch,heads,seq_q,seq_k,dim,causal,median_us,torch"]
for d in (64, 128):
    for N in (1024, 2048, 4096):
        q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    for _ in range(3):
                        torch.nn.functional.scaled_dot_product_attention(q, k, v)
                    torch.cuda.synchronize()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    ms = []
                    for _ in range(20):
                        s.record(); torch.nn.functional.scaled_dot_product_attention(q, k, v); e.record()
                        torch.cuda.synchronize(); ms.append(s.elapsed_time(e))
                ms.sort()
                med = ms[len(ms) // 2]
                print("sdpa %-5s d%-3d N %-5d median %8.1f us %7.1f TFLOP/s" % (
                    name, d, N, med * 1e3, 4 * B * H * N * N * d / (med * 1e-3) / 1e12))
                rows.append("%s,sdpa-%s,bf16,%d,%d,%d,%d,%d,0,%.3f,%s" % (
                    gpu.replace(",", " "), name, B, H, N, N, d, med * 1e3, torch.__version__))
            except Exception as ex:
                print("sdpa %-5s d%-3d unavailable: %s" % (name, d, str(ex).splitlines()[0][:100]))
if len(rows) > 1:
    open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
if [ -s "$logs/sdpa.csv" ]; then
  build/fatune baseline "$logs/sdpa.csv" || rc=1
  say "fatune report (fatune's TFLOP/s against seq_len beside PyTorch's)"
  build/fatune report --out "$logs/report" || rc=1
fi
# The Python package from its source folder on this build's libfatune (no
# pip install: this machine may reach no package registry): its tests with
# the torch ones on the GPU, then fatune.attention beside
# scaled_dot_product_attention, accuracy and speed, and its per-call cost.
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" FATUNE_LIBRARY="$PWD/build/libfatune.so" \
       FATUNE_EXECUTABLE="$PWD/build/fatune"
say "Python: pytest python/tests"
if python3 -c "import pytest, numpy, torch" 2>/dev/null; then
  timeout 300 python3 -m pytest -q -rs python/tests --deselect python/tests/test_tune.py::test_tune_then_best \
    2>&1 | tee "$logs/pytest.txt" | tail -n 25
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
else
  echo "SKIPPED: python3 here lacks pytest, numpy or torch"
fi
say "Python: fatune.attention against scaled_dot_product_attention"
timeout 200 python3 python/tests/bench_sdpa.py 2>&1 | tee "$logs/fatune-vs-sdpa.txt"
r=${PIPESTATUS[0]}
[ "$r" -eq 0 ] || [ "$r" -eq 77 ] || rc=1
say "done: tests exit $tests_rc, overall $rc"
exit $rc
