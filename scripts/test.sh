#!/usr/bin/env bash
# Installs what is missing, builds fatune twice (plain, and with AddressSanitizer
# and UndefinedBehaviorSanitizer), runs the whole test suite on both (and the
# Python package's tests on the plain build), then each fuzz harness for 10 s.
# Each stage says how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

stage_start=$SECONDS
stage_done() {  # stage_done NAME: the time since the last stage ended
  echo "test.sh: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}

scripts/install-deps.sh
stage_done "installing what was missing"
jobs=$(nproc)

# -Werror here, not in CMakeLists.txt: the suite keeps the build warning-free
# without failing builds on compilers we have not tried.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-Werror >/dev/null
cmake --build build -j "$jobs"
stage_done "the build"
(cd build && ctest --output-on-failure -j "$jobs")
stage_done "the test suite"

# The Python package from the libfatune just built, into the two virtual
# environments install-deps.sh made: its tests with PyTorch (CPU tensors on
# the emulator; only those that need a GPU SKIPPED), then without it, as a
# NumPy user has it (the torch tests SKIPPED).
for venv in build/venv build/venv-numpy; do
  FATUNE_PREBUILT="$PWD/build" "$venv/bin/pip" install -q --disable-pip-version-check ./python
  echo "python/tests in $venv: $("$venv/bin/python" -c 'import importlib.util as u
print("with PyTorch" if u.find_spec("torch") else "without PyTorch")')"
  FATUNE_KEY="$PWD/build/tests/test.key" "$venv/bin/pytest" -q -rs python/tests
  stage_done "the Python package's tests in $venv"
done

# The sanitizer build runs every test but those labelled slow: the sweeps
# over whole spaces and the long command-line flows, whose C code paths the
# other tests already take (and whose kernels, compiled at run time, carry
# no sanitizer anyway); test_bwd and test_decode run every fourth variant
# of their spaces (FATUNE_TEST_SAMPLE), for the same reason.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFATUNE_SANITIZE=ON -DCMAKE_C_FLAGS=-Werror >/dev/null
cmake --build build-asan -j "$jobs"
stage_done "the sanitizer build"
# ASan's dlopen interceptor makes libasan the caller of NVRTC's own dlopen
# of its builtins library, which then misses libnvrtc's RUNPATH ($ORIGIN):
# where NVRTC is not in the loader's path (PyPI's, in build/venv), a
# sanitized program must be told its folder.
nvrtc_dir=$(dirname "$(sed -n 's/^NVRTC_LIBRARY:FILEPATH=//p' build-asan/CMakeCache.txt)")
(cd build-asan && LD_LIBRARY_PATH="$nvrtc_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
   ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 FATUNE_TEST_SAMPLE=4 \
   ctest --output-on-failure -j "$jobs" -LE slow)
stage_done "the test suite under the sanitizers"

# The fuzz harnesses, briefly: they keep building, and a regression on the
# inputs they have learnt to reach shows at once (scripts/fuzz.sh SECONDS
# fuzzes for longer).
scripts/fuzz.sh 10
stage_done "fuzzing"
