"""The optional compiled extractor (pipeline/read/_scan.cpp, README "The compiled extractor"), and the
start-up signal file (below).


Built when a C++17 compiler and simdjson (Debian: ``libsimdjson-dev``) are present; when the
build fails the install goes on without it and extract uses the Python (msgspec) extractor.
Everything else about the package is in pyproject.toml.
"""

import os
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """``optional=True`` covers a failed compile; this also covers a missing compiler."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001  any build failure: the Python extractor is used
            print(f"scaletrace: compiled extractor not built ({exc}); using the Python extractor")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"scaletrace: compiled extractor not built ({exc}); using the Python extractor")


# Ctrl-C in the console script's first milliseconds, before `scaletrace` is imported (Python's own
# start-up: site, an editable install's finder), printed a KeyboardInterrupt traceback.  This .pth file,
# installed into site-packages and read by `site` before every other one ("00" sorts first), makes
# Ctrl-C and SIGTERM one line and 128 + N from there on, in the `scaletrace` command only (its argv[0]);
# in any other Python process it compares one string.  scaletrace/__init__.py takes over from it.
# A wheel (pip install .) installs it; an editable install places no data files, so `make setup` copies it.
_PATHS = sysconfig.get_paths()
SITE_PACKAGES = os.path.relpath(_PATHS["purelib"], _PATHS["data"])  # lib/python3.X/site-packages in a venv

setup(
    data_files=[(SITE_PACKAGES, ["pipeline/common/00-scaletrace-signals.pth"])],
    ext_modules=[Extension(
        "scaletrace.pipeline.read._scan",
        sources=["pipeline/read/_scan.cpp"],
        libraries=["simdjson"],
        extra_compile_args=["-std=c++17", "-O3", "-pthread"],  # a large file is scanned on threads
        extra_link_args=["-pthread"],
        language="c++",
        optional=True,
    )],
    cmdclass={"build_ext": OptionalBuildExt},
)
