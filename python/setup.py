"""Builds libfatune and the fatune command with CMake, into the wheel.

The sources are the repository this folder sits in ($FATUNE_SOURCE_DIR
overrides). $FATUNE_PREBUILT names a build folder whose libfatune.so and
fatune are taken as they are, instead of building (the test script uses
the build it has just made).
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


class BuildWithCMake(build_py):
    def run(self) -> None:
        super().run()
        prebuilt = os.environ.get("FATUNE_PREBUILT")
        if prebuilt:
            build = Path(prebuilt).resolve()
        else:
            build = Path(self.build_lib).resolve().parent / "fatune-cmake"
            subprocess.check_call(["cmake", "-S", str(SOURCE), "-B", str(build),
                                   "-DCMAKE_BUILD_TYPE=Release"])
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


class NativeDistribution(Distribution):
    """A wheel for this platform: it carries a shared library."""

    def has_ext_modules(self) -> bool:
        return True


setup(version=version(), cmdclass={"build_py": BuildWithCMake}, distclass=NativeDistribution)
