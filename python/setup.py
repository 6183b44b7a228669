"""Builds libfatune and the fatune command with CMake, into the wheel.

The sources are the repository this folder sits in ($FATUNE_SOURCE_DIR
overrides). Built here, the wheel stands alone: it carries the shared
libraries libfatune needs (Lua, SQLite, libsodium), finds NVRTC in the
nvidia-cuda-nvrtc wheel it depends on, and depends on ziglang, a C compiler
the emulator uses where the machine has none (fatune/_lib.py). So it
installs and runs on a machine with neither a CUDA toolkit nor a compiler.

$FATUNE_PREBUILT names a build folder whose libfatune.so and fatune are
taken as they are, instead of building (the test script uses the build it
has just made): such a package is for this machine, using its NVRTC and its
compiler, and depends on numpy alone.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SOURCE = Path(os.environ.get("FATUNE_SOURCE_DIR", HERE.parent)).resolve()


def version() -> str:
    text = (SOURCE / "CMakeLists.txt").read_text()
    m = re.search(r"project\(fatune VERSION ([0-9.]+)", text)
    if not m:
        raise RuntimeError("no project(fatune VERSION ...) in %s/CMakeLists.txt" % SOURCE)
    return m.group(1)


PREBUILT = os.environ.get("FATUNE_PREBUILT")

# Libraries every Linux has (glibc's and the loader), never carried.
SYSTEM = re.compile(r"^(libc|libm|libdl|libpthread|librt|libgcc_s|ld-linux[-\w]*)\.so")


def carried(lib: Path) -> list:
    """The shared libraries lib loads that a wheel must carry: all that ldd
    resolves but glibc's and NVRTC (which comes from its own wheel)."""
    out = subprocess.run(["ldd", str(lib)], stdout=subprocess.PIPE, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m and not SYSTEM.match(m.group(1)) and not m.group(1).startswith("libnvrtc"):
            found.append(Path(m.group(2)))
    return found


# The NVRTC wheel the package depends on: CUDA 13's, or $FATUNE_NVRTC_WHEEL
# (nvidia-cuda-nvrtc-cu12 for a build against CUDA 12's NVRTC).
NVRTC_WHEEL = os.environ.get("FATUNE_NVRTC_WHEEL", "nvidia-cuda-nvrtc>=13,<14")


def check_nvrtc(lib: Path) -> None:
    """lib must load the NVRTC of the wheel the package depends on."""
    out = subprocess.run(["ldd", str(lib)], stdout=subprocess.PIPE, text=True, check=True).stdout
    m = re.search(r"libnvrtc\.so\.(\d+)", out)
    want = re.search(r"-cu(\d+)", NVRTC_WHEEL)
    want = want.group(1) if want else "13"
    if not m or m.group(1) != want:
        raise RuntimeError("%s loads %s, but the wheel depends on %s (FATUNE_NVRTC_WHEEL)"
                           % (lib, m.group(0) if m else "no NVRTC", NVRTC_WHEEL))


class BuildWithCMake(build_py):
    def run(self) -> None:
        super().run()
        if PREBUILT:
            build = Path(PREBUILT).resolve()
        else:
            build = Path(self.build_lib).resolve().parent / "fatune-cmake"
            subprocess.check_call(["cmake", "-S", str(SOURCE), "-B", str(build),
                                   "-DCMAKE_BUILD_TYPE=Release", "-DFATUNE_WHEEL=ON"])
            subprocess.check_call(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2),
                                   "--target", "fatune", "fatune_shared"])
        dest = Path(self.build_lib) / "fatune" / "_bin"
        dest.mkdir(parents=True, exist_ok=True)
        lib = build / "libfatune.so"
        exe = build / "fatune"
        for f in (lib, exe):
            if not f.exists():
                raise RuntimeError("%s was not built" % f)
        # The real file under the unversioned name: a wheel keeps no symlinks.
        shutil.copy2(lib.resolve(), dest / "libfatune.so")
        shutil.copy2(exe, dest / "fatune")
        if not PREBUILT:  # found by libfatune's RUNPATH, $ORIGIN
            check_nvrtc(lib)
            for f in carried(lib):
                shutil.copy2(f, dest / f.name)


class NativeDistribution(Distribution):
    """A wheel for this platform: it carries a shared library."""

    def has_ext_modules(self) -> bool:
        return True


def requirements() -> list:
    """numpy; and, for a wheel that stands alone, NVRTC and a C compiler."""
    base = ["numpy>=1.22"]
    return base if PREBUILT else base + [NVRTC_WHEEL, "ziglang"]


setup(version=version(), install_requires=requirements(),
      cmdclass={"build_py": BuildWithCMake}, distclass=NativeDistribution)
