"""Builds troupe._native with CMake for the Python running pip (docs/python.md, "Installing").

TROUPE_BUILD_DIR names a configured build of this repository to build the extension in (the
tests use the tree's own `build`); without it, a build of its own in pip's temporary folder
(the whole runtime, without tests or apps: several minutes)."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REPOSITORY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("TROUPE_BUILD_DIR") or os.path.join(os.path.abspath(self.build_temp),
                                                                   "cmake")
        if not os.environ.get("TROUPE_BUILD_DIR"):
            subprocess.run(["cmake", "-S", REPOSITORY, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                            "-DTROUPE_TESTS=OFF", "-DTROUPE_APPS=OFF",
                            f"-DTROUPE_PYTHON_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "troupe_native", "-j",
                        str(os.cpu_count() or 1)], check=True)
        built = os.path.join(build, "python", "troupe")
        module = [f for f in os.listdir(built) if f.startswith("_native.")]
        if len(module) != 1:
            raise RuntimeError(f"no single troupe._native in {built}: {module}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, module[0]), target)


setup(ext_modules=[Extension("troupe._native", sources=[])], cmdclass={"build_ext": CMakeBuild})
