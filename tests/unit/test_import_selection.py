"""engine.IMPL follows the environment: native by default, the twin when forced, an error when
the native core is required but missing."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

from tests.conftest import IMPLEMENTATIONS

PROBE = "import engine, warnings; print(engine.IMPL)"


def _run(env_updates: dict, code: str = PROBE, shadow: str | None = None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter; with `shadow`, import kafkalog from that tree instead.

    -S keeps site from installing the editable-install import hook, which would win over PYTHONPATH.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKALOG_")}
    env.update(env_updates)
    flags = ["-W", "always"]
    if shadow:
        env["PYTHONPATH"] = os.pathsep.join([shadow, sysconfig.get_paths()["purelib"]])
        flags.append("-S")
    return subprocess.run([sys.executable, *flags, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=shadow or None)


def test_impl_matches_this_process():
    import engine

    forced = os.environ.get("KAFKALOG_NO_EXTENSIONS") == "1"
    assert engine.IMPL == ("python" if forced else IMPLEMENTATIONS[0])


def test_no_extensions_forces_the_twin():
    out = _run({"KAFKALOG_NO_EXTENSIONS": "1", "KAFKALOG_REQUIRE_EXTENSIONS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "python"
    assert "RuntimeWarning" not in out.stderr  # asked for, so no warning


def test_missing_core_warns_or_fails_when_required(tmp_path):
    """Shadow engine._native._records with a module that fails to import, as a missing .so would."""
    shadow = tmp_path / "shadow"
    (shadow / "engine" / "_native").mkdir(parents=True)
    import engine

    src = os.path.dirname(engine.__file__)  # every Python module of engine/, none of the native ones
    shutil.copytree(src, shadow / "engine", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "_native", "*.so", "*.c", "*.pyx"))
    root = os.path.dirname(src)
    for package in ("segments", "txn", "replication"):  # the layers the engine facade builds on
        shutil.copytree(os.path.join(root, package), shadow / package, ignore=shutil.ignore_patterns("__pycache__"))
    (shadow / "engine" / "_native" / "__init__.py").write_text("")
    (shadow / "engine" / "_native" / "_records.py").write_text("raise ImportError('no native core here')\n")
    loose = _run({}, shadow=str(shadow))
    assert loose.returncode == 0, loose.stderr
    assert loose.stdout.strip() == "python"
    assert "RuntimeWarning" in loose.stderr and "no native core here" in loose.stderr
    strict = _run({"KAFKALOG_REQUIRE_EXTENSIONS": "1"}, shadow=str(shadow))
    assert strict.returncode != 0
    assert "KAFKALOG_REQUIRE_EXTENSIONS=1" in strict.stderr


def test_the_suite_collects_where_the_native_core_is_not_built():
    """Every test module imports without the native extensions (a clone that never built them): pytest collects the
    whole unit suite, those needing the core marked to skip, rather than failing at collection."""
    hide = "; ".join(f"sys.modules[{m!r}] = None" for m in (
        "engine._native._records", "engine._native._records_builder", "engine._native._columnar",
        "engine._native._log_scan", "engine._native._log_validator", "engine._native._cleaner_records",
        "engine._native._replica_fetcher", "engine._native._replica", "engine._native._lock",
        "engine._native._log_read", "engine._native._segment_appender", "engine._native._accumulator",
        "engine._native._offset_map", "engine._native._residency", "engine._native._offset_checkpoint"))
    run = _run({"KAFKALOG_NO_EXTENSIONS": "1", "KAFKALOG_REQUIRE_EXTENSIONS": "0"},
               f"import sys; {hide}; import pytest; sys.exit(pytest.main(['-q', '--collect-only', '-p', "
               f"'no:cacheprovider', '-p', 'no:xdist', '-p', 'no:randomly', 'tests/unit']))")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.rstrip().splitlines()[-1].split()[1:3] == ["tests", "collected"], run.stdout[-3000:]
