#!/usr/bin/env bash
# gpu-check.sh: the checks that need a GPU, in one go, within a time budget,
# logs in one folder.
#
# Uses the build in build/ when it runs here (Lua and SQLite are linked in
# statically, so a build made on another machine runs on this one; the
# shared libfatune needs liblua5.4.so.0, libsqlite3.so.0 and libsodium.so.23
# on the loader's path), else builds one. The steps, most telling first:
#   tests    the GPU tests (ctest -L '^gpu$')
#   fwd      the main job in bf16 at seq 4096, dims 128 and 64, with --sass:
#            every variant validated and timed, and the timing model's
#            prediction beside each measured time (the model's error)
#   causal   the same, causal, at d128 (wg's and tc's causal kernels)
#   fp8      the main job in e4m3 at seq 4096, dims 128 and 256, with --sass
#            (wg's fp8 kernels; Hopper only, skipped elsewhere)
#   sdpa     PyTorch's scaled_dot_product_attention (flash, FlashAttention-2's
#            kernels, and cudnn) on the same problems, seq 1024 to 4096,
#            recorded with fatune baseline; and the bf16 rate a dense GEMM
#            sustains (8192^3, random data: the timing model's wgmma rate),
#            and whether the tensor cores and MUFU.EX2 run at once
#            (python/tests/bench_mufu_overlap.py, Triton)
#   bwd      the main job's backward pass (--op bwd) in bf16, dims 128 and
#            64, beside PyTorch's flash backward; and the rate of fp32
#            atomic adds in FlashAttention-2's dQ pattern
#            (python/tests/bench_atomics.py, Triton)
#   python   the Python package's tests (the torch ones on the GPU), then
#            fatune.attention beside scaled_dot_product_attention
#            (python/tests/bench_sdpa.py)
#   fp32     the main job in fp32 (the SIMT family), dims 64 and 128
#   seqs     bf16 at seq 1024 and 2048, for fatune report's TFLOP/s
#            against seq_len beside PyTorch's
#   fakegpu  the fake driver's tests (ctest -L '^fakegpu$') against the real
#            driver: where the two disagree, the fake is wrong
#   report   fatune report
# A step starts only while the budget (GPU_CHECK_SECONDS, default 540) has
# a minute left, and runs for at most what is left; one skipped says so.
# GPU_CHECK_STEPS="fwd bwd" runs only those.
#
# usage: scripts/gpu-check.sh [--pack] [LOG_DIR]     (default gpu-logs)
#   LOG_DIR gets gpu-check.log (everything printed) and each step's files;
#   with --pack the step files go into one archive there, steps.tar.gz,
#   rewritten after each step (for a machine that hands back few files).
set -uo pipefail
cd "$(dirname "$0")/.."
pack=0
[ "${1:-}" = --pack ] && { pack=1; shift; }
logs=${1:-gpu-logs}
mkdir -p "$logs" || exit 1
logs=$(cd "$logs" && pwd)
steps_dir="$logs"
[ $pack = 1 ] && { steps_dir=$(mktemp -d) || exit 1; }
exec > >(tee "$logs/gpu-check.log") 2>&1
budget=${GPU_CHECK_SECONDS:-540}
wanted=${GPU_CHECK_STEPS:-tests fwd causal fp8 sdpa bwd python fp32 seqs fakegpu report}
start=$SECONDS
rc=0
say() { echo "== $* ($((SECONDS - start)) s)"; }
left() { echo $((budget - (SECONDS - start))); }
# The seconds step NAME may take (at most WANT, what the budget leaves
# less 10), or nothing when it does not run.
allot() {
  case " $wanted " in *" $1 "*) ;; *) return 1 ;; esac
  local l; l=$(left)
  if [ "$l" -lt 60 ]; then say "SKIPPED $1: $l s of the budget left" >&2; return 1; fi
  local t=$(( $2 < l - 10 ? $2 : l - 10 ))
  echo "$t"
}
packed() { [ $pack = 1 ] && tar czf "$logs/steps.tar.gz" -C "$steps_dir" . ; }
# bench STEP SECONDS LOG SCRIPT TITLE: a Python benchmark of the project's,
# within the budget, its output into LOG; its exit 77 (no GPU, no module)
# is a skip, any other failure fails the run.
bench() {
  local t r
  t=$(allot "$1" "$2") || return 0
  say "$5"
  timeout "$t" python3 "$4" 2>&1 | tee "$steps_dir/$3"
  r=${PIPESTATUS[0]}
  [ "$r" -eq 0 ] || [ "$r" -eq 77 ] || rc=1
  packed
}

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
# One database for the run, so the report sees this run's trials alone.
export FATUNE_DB="$steps_dir/fatune.db"

# The variants of one main job, fastest first, then the failures.
summary() {
  python3 - "$1" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
ok = sorted((r for r in rows if r["status"] == "ok" and r.get("median_us")),
            key=lambda r: r["median_us"])
print("%d variants, %d ok and timed" % (len(rows), len(ok)))
print("%-62s %9s %7s %7s %6s %4s %3s" % ("variant", "us", "TFLOP/s", "model", "error", "regs", "CTA"))
for r in ok[:12]:
    m = r.get("model_tflops")
    print("%-62s %9.1f %7.1f %7s %6s %4s %3s" % (
        r["name"], r["median_us"], r["tflops"], "%.0f" % m if m else "-",
        "%+.0f%%" % (100 * (m / r["tflops"] - 1)) if m and r["tflops"] else "-",
        r.get("registers"), r.get("ctas_per_sm")))
for r in rows:
    if r["status"] != "ok":
        print("%s: %s: %s" % (r["status"], r["name"], (r.get("message") or "")[:200]))
PY
}

# A main job: NAME, then fatune's arguments; its JSON and stderr under
# steps/, its summary here.
tune() {
  local name=$1 t; shift
  t=$(allot "$step" 200) || return 0
  say "fatune $* ($t s at most)"
  timeout "$t" build/fatune "$@" --backend cuda --timeout 20 --json \
    >"$steps_dir/$name.json" 2>"$steps_dir/$name.err"
  local r=$?
  tail -n 3 "$steps_dir/$name.err"
  [ $r -eq 0 ] || { say "exit $r"; rc=1; }
  [ -s "$steps_dir/$name.json" ] && summary "$steps_dir/$name.json"
  packed
}

step=tests
if t=$(allot tests 150); then
  say "GPU tests"
  (cd build && timeout "$t" ctest -L '^gpu$' --output-on-failure) || rc=1
fi

step=fwd
for dim in 128 64; do
  tune "fwd-bf16-d$dim-s4096" --dim "$dim" --seq 4096 --dtype bf16 --trial-ms 60 --sass
done

step=causal
tune "fwd-bf16-d128-s4096-causal" --dim 128 --seq 4096 --dtype bf16 --causal --trial-ms 60 --sass

# fp8 (e4m3): wgmma's fp8 exists on sm_90a alone.
step=fp8
case " $wanted " in *" fp8 "*)
  if [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1)" = "9.0" ]; then
    for dim in 128 256; do
      tune "fwd-e4m3-d$dim-s4096" --dim "$dim" --seq 4096 --dtype e4m3 --trial-ms 60 --sass
    done
  else
    say "fp8: skipped (no Hopper GPU: e4m3 runs on sm_90a's wgmma)"
  fi ;;
esac

step=sdpa
if t=$(allot sdpa 90); then
  say "torch.nn.functional.scaled_dot_product_attention, bf16, B 4 H 16 N 1024 to 4096"
  timeout "$t" python3 - "$steps_dir/sdpa.csv" <<'PY' 2>&1 | tee "$steps_dir/torch-sdpa.txt"
import sys
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
B, H = 4, 16
gpu = torch.cuda.get_device_name()
a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(3):
    a @ b
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(10):
    a @ b
e.record()
torch.cuda.synchronize()
print("bf16 GEMM 8192^3, random data: %.0f TFLOP/s (mean of 10)"
      % (10 * 2 * 8192 ** 3 / (s.elapsed_time(e) * 1e-3) / 1e12))
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
  [ -s "$steps_dir/sdpa.csv" ] && { build/fatune baseline "$steps_dir/sdpa.csv" || rc=1; }
  packed
fi
bench sdpa 45 mufu-overlap.txt python/tests/bench_mufu_overlap.py \
  "tensor cores and MUFU.EX2 at once or in turn (the timing model's overlap of wgmma and the softmax)"

# The backward pass: validated on rows computed in float64 on the CPU,
# timed (D's, dK/dV's and dQ's launches together), and PyTorch's flash
# backward on the same problem, TFLOP/s counted the same way (10 B H N^2 d).
step=bwd
for dim in 128 64; do
  tune "bwd-bf16-d$dim-s4096" --op bwd --dim "$dim" --seq 4096 --dtype bf16 --trial-ms 40
done
if t=$(allot bwd 60); then
  say "torch: scaled_dot_product_attention's backward (flash), bf16, B 4 H 16 N 4096"
  timeout "$t" python3 - <<'PY' 2>&1 | tee "$steps_dir/torch-sdpa-bwd.txt"
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
  packed
fi
bench bwd 45 atomics.txt python/tests/bench_atomics.py \
  "fp32 atomic adds in FlashAttention-2's dQ pattern and per 128-byte line (the backward model's atomics)"

# The Python package from its source folder on this build's libfatune (no
# pip install: this machine may reach no package registry).
step=python
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" FATUNE_LIBRARY="$PWD/build/libfatune.so" \
       FATUNE_EXECUTABLE="$PWD/build/fatune"
if t=$(allot python 150); then
  say "Python: pytest python/tests"
  if python3 -c "import pytest, numpy, torch" 2>/dev/null; then
    timeout "$t" python3 -m pytest -q -rs -x python/tests \
      --deselect python/tests/test_tune.py::test_tune_then_best 2>&1 \
      | tee "$steps_dir/pytest.txt" | tail -n 25
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  else
    echo "SKIPPED: python3 here lacks pytest, numpy or torch"
  fi
  packed
fi
bench python 90 fatune-vs-sdpa.txt python/tests/bench_sdpa.py \
  "Python: fatune.attention against scaled_dot_product_attention"

step=fp32
for dim in 64 128; do
  tune "fwd-fp32-d$dim-s4096" --dim "$dim" --seq 4096 --dtype fp32 --trial-ms 60
done

step=seqs
for dim in 128 64; do
  for seq in 1024 2048; do
    tune "fwd-bf16-d$dim-s$seq" --dim "$dim" --seq "$seq" --dtype bf16 --trial-ms 30
  done
done

# With the fake moved aside, the loader finds the GPU's libcuda.so.1. Fault
# injection is the fake's alone: those parts say SKIPPED here.
if t=$(allot fakegpu 150); then
  say "fakegpu tests against the real driver"
  fake=build/tests/fakecuda/libcuda.so.1
  if [ -e "$fake" ]; then
    mv "$fake" "$fake.off"
    (cd build && timeout "$t" ctest -L '^fakegpu$' --output-on-failure) || rc=1
    mv "$fake.off" "$fake"
  fi
fi

if t=$(allot report 60); then
  say "fatune report (fatune's TFLOP/s against seq_len beside PyTorch's)"
  timeout "$t" build/fatune report --out "$steps_dir/report" || rc=1
  packed
fi
packed
say "done: exit $rc"
exit $rc
