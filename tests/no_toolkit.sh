#!/usr/bin/env bash
# no_toolkit.sh FATUNE: the README's two commands on a machine without a
# CUDA toolkit. In a mount namespace where the toolkit's folder is an empty
# file system, a fresh clone of this checkout's HEAD runs
# scripts/install-deps.sh (which then takes NVRTC and cuda.h from PyPI),
# cmake -S . -B build, the build, and the main job. Its results must be those
# of FATUNE, a fatune built with the toolkit, on the same inputs: every
# field but NVRTC's own figures (compile time, registers, spills) and
# wall-clock times. Then the Python wheel, built there (pip wheel ./python):
# installed into a fresh virtual environment, it must run the emulator with
# no compiler either (gcc's and the C headers' folders hidden too, PATH the
# environment's alone), using its own (ziglang's): tests/wheel_check.py. Its
# size and install time are printed. Exits 77 (SKIPPED) where no mount
# namespace can be made (not root, or a container that forbids it).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
with=$(readlink -f "${1:?usage: tests/no_toolkit.sh FATUNE (a fatune built with the toolkit)}")
[ -x "$with" ] || { echo "tests/no_toolkit.sh: '$with' is not a program to run" >&2; exit 2; }
cuda=$(readlink -f "${CUDAToolkit_ROOT:-/usr/local/cuda}")
if [ ! -d "$cuda" ] || ! unshare -m bash -c 'mount -t tmpfs none "$1"' hide "$cuda" 2>/dev/null; then
  echo "SKIPPED: no toolkit at $cuda to hide, or no mount namespace to hide it in (unshare -m) here"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fatune-no-toolkit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
git clone -q "$here" "$tmp/src"
args=(--dim 64 --seq 4096 --seed 7 --json)
"$with" "${args[@]}" --db "$tmp/with.db" >"$tmp/with.json" 2>"$tmp/with.err"

# Inside: the toolkit hidden, the README's commands (FATUNE_NO_TORCH: the
# Python package's PyTorch tests are not run here, and torch's wheels bring
# NVRTC along, which would hide a missing install step).
export tmp cuda
export args_text="${args[*]}"
start=$(date +%s)
if ! unshare -m bash -euo pipefail -c '
  mount -t tmpfs none "$cuda"
  cd "$tmp/src"
  if nvcc --version >/dev/null 2>&1 || [ -e /usr/local/cuda/include/nvrtc.h ]; then
    echo "the toolkit is still visible" >&2
    exit 1
  fi
  FATUNE_NO_TORCH=1 scripts/install-deps.sh
  cmake -S . -B build >"$tmp/cmake.log"
  grep "NVRTC without a CUDA toolkit" "$tmp/cmake.log"
  cmake --build build -j "$(nproc)" >"$tmp/build.log"
  build/fatune --version
  ldd build/fatune | grep nvrtc
  build/fatune $args_text --db "$tmp/without.db" >"$tmp/without.json" 2>"$tmp/without.err"

  build/venv/bin/pip wheel -q --disable-pip-version-check --no-deps -w "$tmp/dist" ./python
  whl=$(ls "$tmp"/dist/fatune-*.whl)
  echo "wheel $(basename "$whl"): $(($(stat -c %s "$whl") / 1024)) KiB"
  python3 -m venv "$tmp/wv"
  t0=$(date +%s)
  "$tmp/wv/bin/pip" install -q --disable-pip-version-check "$whl"
  echo "installed with its dependencies in $(($(date +%s) - t0)) s"
  mount -t tmpfs none /usr/lib/gcc
  mount -t tmpfs none /usr/include
  cd "$tmp"
  env -i HOME="$tmp" PATH="$tmp/wv/bin" "$tmp/wv/bin/python" "$tmp/src/tests/wheel_check.py"
' >"$tmp/inside.log" 2>&1; then
  echo "FAIL: without the toolkit: $(tail -c 2000 "$tmp/inside.log")"
  exit 1
fi
echo "without the toolkit, set up, built and tuned in $(($(date +%s) - start)) s:"
sed 's/^/  /' "$tmp/inside.log" | grep -v "^  install-deps: installing" || true
python3 - "$tmp" <<'EOF'
import json, sys
d = sys.argv[1]
a, b = (json.load(open("%s/%s.json" % (d, w))) for w in ("with", "without"))
own = {"compile_ms", "emu_ms", "registers", "spill_bytes", "median_us", "min_us", "p20_us",
       "p80_us"}
assert a and len(a) == len(b), (len(a), len(b))
diff = [(x["name"], k, x[k], y.get(k)) for x, y in zip(a, b) for k in x
        if k not in own and x[k] != y.get(k)]
assert not diff, diff[:5]
assert all(r["status"] == "ok" for r in b), [r["status"] for r in b]
print("ok    the main job without the toolkit: %d variants, every field as with it (%s first)"
      % (len(b), b[0]["name"]))
EOF
