#!/usr/bin/env bash
# Installs what fatune needs to build and test, when it is missing: a C
# compiler, CMake, pkg-config, Lua 5.4, SQLite 3 and libsodium (Debian
# packages); Python 3 for the command-line tests; gnuplot (without X) for
# fatune report's plots; help2man for the man page, made from fatune --help;
# clang with its runtime libraries (libFuzzer and the
# sanitizers, which Debian 12 ships in libclang-rt-dev, only recommended by
# clang) for the fuzz harnesses (scripts/fuzz.sh). The CUDA toolkit
# (NVRTC and cuda.h) must already be on the machine; it is not a Debian
# package of the required version, so its absence is reported, not fixed.
set -euo pipefail

need=()
for pkg in gcc make cmake pkg-config liblua5.4-dev libsqlite3-dev libsodium-dev python3 gnuplot-nox \
           help2man clang libclang-rt-dev; do
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
if [ ! -f "$cuda/include/nvrtc.h" ] && ! command -v nvcc >/dev/null 2>&1; then
  echo "install-deps: no CUDA toolkit found (looked for $cuda/include/nvrtc.h and nvcc);" \
       "install CUDA 12 or 13 and set CUDAToolkit_ROOT" >&2
  exit 1
fi
