#!/usr/bin/env bash
# Installs what fatune needs to build and test, when it is missing: a C
# compiler, CMake, pkg-config, Lua 5.4, SQLite 3 and libsodium (Debian
# packages); Python 3 for the command-line tests, with venv for the Python
# package's tests: numpy, pytest, ml_dtypes and PyTorch (PyPI's torch,
# several GB with its nvidia-* wheels, a few minutes) in a virtual
# environment under build/ ($FATUNE_VENV names another; FATUNE_NO_TORCH=1
# leaves torch out), and numpy, pytest and ml_dtypes alone in a second one
# ($FATUNE_VENV-numpy) for the package's torch-free path (Debian's python3
# takes no pip installs system-wide); gnuplot (without X) for
# fatune report's plots; help2man for the man page, made from fatune --help;
# clang with its runtime libraries (libFuzzer and the
# sanitizers, which Debian 12 ships in libclang-rt-dev, only recommended by
# clang) for the fuzz harnesses (scripts/fuzz.sh); nvdisasm and cuobjdump
# (PyPI's nvidia-cuda-nvdisasm and nvidia-cuda-cuobjdump, linked into
# /usr/local/bin) for fatune compile --sass and the SASS tests, where the
# CUDA toolkit lacks them; Slurm (slurmctld, slurmd, slurm-client and munge)
# and the sqlite3 shell for the test on a one-node cluster (tests/slurm.sh),
# which starts its own daemons (the packages' services are not needed).
# fatune needs no CUDA toolkit: only NVRTC and the driver API's header.
# Where no toolkit is found ($CUDAToolkit_ROOT, /usr/local/cuda, nvcc), they
# come from PyPI (nvidia-cuda-nvrtc and nvidia-cuda-runtime, CUDA 13;
# FATUNE_CUDA_WHEELS names others, e.g. their -cu12 builds for an older
# driver) into the virtual environment, where the build finds them.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in gcc make cmake pkg-config liblua5.4-dev libsqlite3-dev libsodium-dev python3 python3-venv \
           gnuplot-nox help2man \
           clang libclang-rt-dev \
           sqlite3 munge slurmctld slurmd slurm-client; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

cuda="${CUDAToolkit_ROOT:-/usr/local/cuda}"
venv="${FATUNE_VENV:-build/venv}"
pip_into() {  # pip_into VENV PACKAGE...: a virtual environment with these, made when missing
  local v=$1
  shift
  mkdir -p "$(dirname "$v")"
  [ -x "$v/bin/pip" ] || python3 -m venv "$v"
  # No cache: PyTorch's wheels would otherwise stay on disk a second time.
  "$v/bin/pip" install -q --disable-pip-version-check --no-cache-dir "$@"
}
free_gb() {  # free_gb PATH: whole GB free on PATH's file system
  df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }'
}
if ! "$venv/bin/python" -c "import numpy, pytest, ml_dtypes" 2>/dev/null; then
  echo "install-deps: numpy, pytest and ml_dtypes into $venv"
  pip_into "$venv" numpy pytest ml_dtypes
fi
if [ "${FATUNE_NO_TORCH:-0}" != 1 ] && ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  # pip holds every downloaded wheel until it has installed them all: about
  # 4 GB of wheels and 6 GB installed at the peak.
  need_gb=11
  have_gb=$(free_gb "$(dirname "$venv")")
  tmp_gb=$(free_gb "${TMPDIR:-/tmp}")
  [ "$tmp_gb" -lt "$have_gb" ] && have_gb=$tmp_gb
  if [ "$have_gb" -lt "$need_gb" ]; then
    echo "install-deps: PyTorch needs about $need_gb GB free (under $(dirname "$venv") and" \
         "${TMPDIR:-/tmp}), $have_gb GB are: free some, or set FATUNE_NO_TORCH=1 to test without it" >&2
    exit 1
  fi
  echo "install-deps: PyTorch into $venv (several GB, a few minutes)"
  pip_into "$venv" torch
fi
# A toolkit is a compiler (nvcc) that works, or NVRTC's header where one is
# said to be.
if [ ! -f "$cuda/include/nvrtc.h" ] && ! nvcc --version >/dev/null 2>&1; then
  wheels=(${FATUNE_CUDA_WHEELS:-nvidia-cuda-nvrtc nvidia-cuda-runtime})
  if ! "$venv/bin/python" -c 'import glob, sys, nvidia
sys.exit(not any(glob.glob(d + "/*/include/nvrtc.h") for d in nvidia.__path__))' 2>/dev/null; then
    echo "install-deps: no CUDA toolkit (looked for $cuda/include/nvrtc.h and nvcc):" \
         "${wheels[*]} into $venv"
    pip_into "$venv" "${wheels[@]}"
  fi
fi
if ! "$venv-numpy/bin/python" -c "import numpy, pytest, ml_dtypes" 2>/dev/null; then
  echo "install-deps: numpy, pytest and ml_dtypes into $venv-numpy (no PyTorch)"
  pip_into "$venv-numpy" numpy pytest ml_dtypes
fi

# The disassemblers: from PyPI when neither PATH nor the toolkit has them.
# Debian's own Python refuses pip installs outside a venv (PEP 668) unless
# told --break-system-packages; these packages only add files under nvidia/.
if ! command -v nvdisasm >/dev/null 2>&1 && [ ! -x "$cuda/bin/nvdisasm" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  fi
  echo "install-deps: installing nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump (PyPI)"
  pkgs=(nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump)
  $SUDO python3 -m pip install -q "${pkgs[@]}" 2>/dev/null ||
    $SUDO python3 -m pip install -q --break-system-packages "${pkgs[@]}"
  bin=$(python3 -c 'import nvidia, os
for d in nvidia.__path__:
  for s in ("cu13/bin", "cu12/bin", "cuda_nvdisasm/bin"):
    if os.access(os.path.join(d, s, "nvdisasm"), os.X_OK): print(os.path.join(d, s)); raise SystemExit')
  [ -n "$bin" ] || { echo "install-deps: nvdisasm not found after pip install" >&2; exit 1; }
  for tool in nvdisasm cuobjdump; do
    if [ -x "$bin/$tool" ]; then $SUDO ln -sf "$bin/$tool" "/usr/local/bin/$tool"; fi
  done
fi
