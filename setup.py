"""The optional compiled extractor (pipeline/read/_scan.cpp, README "The compiled extractor").

Built when a C++17 compiler and simdjson (Debian: ``libsimdjson-dev``) are present; when the
build fails the install goes on without it and extract uses the Python (msgspec) extractor.
Everything else about the package is in pyproject.toml.
"""

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


setup(
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
