"""Build kafkalog's Cython core (engine/_native) with a pure-Python fallback.

The extension is optional: when it cannot be built (no compiler, CC=/bin/false)
the install succeeds with a warning and `engine` loads the pure-Python twin.
With KAFKALOG_REQUIRE_EXTENSIONS=1 a failed build fails the install.
A previously built `.so` is removed before each build so a stale one can never
be packaged or imported in place of the current source.
The wheel installs one top-level package, `engine` (see `packages()`).
"""
import os
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

REQUIRE = os.environ.get("KAFKALOG_REQUIRE_EXTENSIONS") == "1"
NATIVE = os.path.join("engine", "_native")
LAYERS = ("segments", "txn", "replication")  # engine's lower layers, each a top-level folder of the repository


class OptionalBuildExt(build_ext):
    """build_ext that deletes stale outputs first, compiles the extensions in parallel (one per core unless `-j`
    says otherwise) and tolerates failure unless required."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError and friends)
            self._give_up(None, exc)

    def build_extension(self, ext: Extension) -> None:
        target = self.get_ext_fullpath(ext.name)
        if os.path.exists(target):
            os.remove(target)
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError, LinkError, DistutilsExecError
            if os.path.exists(target):
                os.remove(target)
            self._give_up(ext, exc)

    @staticmethod
    def _give_up(ext, exc: Exception) -> None:
        name = ext.name if ext is not None else "the native core"
        if REQUIRE:
            raise RuntimeError(
                f"kafkalog: building {name} failed and KAFKALOG_REQUIRE_EXTENSIONS=1: {exc}"
            ) from exc
        sys.stderr.write(
            f"WARNING: kafkalog: could not build {name} ({exc}); "
            "installing the pure-Python twin only\n"
        )


def extensions() -> list:
    from Cython.Build import cythonize

    flags = ["-O3", "-fno-strict-aliasing"] if os.name != "nt" else ["/O2"]

    def native(name: str, *c_sources: str) -> Extension:
        """engine._native.<name>, built from <name>.pyx and the named C files beside it."""
        sources = [os.path.join(NATIVE, f) for f in (name + ".pyx", *c_sources)]
        return Extension(f"engine._native.{name}", sources=sources, include_dirs=[NATIVE], extra_compile_args=flags)

    crc = "crc32c_impl.c"  # linked into each module that computes a CRC-32C itself
    modules = [native("_records", crc), native("_records_builder", crc), native("_columnar", crc), native("_log_scan"),
               native("_log_validator", crc), native("_cleaner_records"), native("_lock"), native("_accumulator"),
               native("_offset_map", "md5_impl.c"), native("_segment_appender"), native("_log_read"),
               native("_residency"), native("_replica"), native("_replica_fetcher"), native("_offset_checkpoint")]
    exts = cythonize(
        modules,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
            "embedsignature": True,
        },
        quiet=True,
        nthreads=os.cpu_count() or 1,
    )
    for ext in exts:  # cythonize() drops optional=True; our build_ext handles failure instead
        ext.optional = not REQUIRE
    return exts


def packages() -> tuple[list[str], dict[str, str]]:
    """The packages a wheel installs, all under `engine`: engine's own, and the lower layers, whose folders sit at
    the repository's top (segments/, txn/, replication/), mapped to engine.segments, engine.txn and
    engine.replication. Nothing else (bench/, tests/) is installed, and no generic name lands at the top."""
    names = ["engine", *(f"engine.{p}" for p in find_packages("engine"))]
    mapped = {}
    for layer in LAYERS:
        mapped[f"engine.{layer}"] = layer
        names += [f"engine.{layer}", *(f"engine.{layer}.{p}" for p in find_packages(layer))]
    return names, mapped


PACKAGES, PACKAGE_DIR = packages()
setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt}, packages=PACKAGES, package_dir=PACKAGE_DIR)
