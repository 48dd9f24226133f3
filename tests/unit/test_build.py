"""The build: the native core is optional unless required, and a stale build/ never leaks an old .so.

Each case builds a wheel from a copy of the source tree with pip (no build isolation: the test
venv already has setuptools and Cython), installs it into a target folder and imports it there.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("src") / "kafkalog"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dst / name)
    return dst


def _install(src: Path, target: Path, verbose: bool = False, **env_updates) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKALOG_")}
    env.update(env_updates)
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-cache-dir",
         "-v" if verbose else "-q",
         "--target", str(target), str(src)],
        env=env, capture_output=True, text=True, timeout=600)


def _probe(target: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKALOG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
    return subprocess.run([sys.executable, "-S", "-W", "always", "-c", "import engine; print(engine.IMPL)"],
                          env=env, cwd=target, capture_output=True, text=True, timeout=120)


def test_builds_native_then_a_compilerless_rebuild_falls_back_without_leaking(source, tmp_path):
    built = _install(source, tmp_path / "native")
    assert built.returncode == 0, built.stderr
    assert _probe(tmp_path / "native").stdout.strip() == "cython"
    assert list((tmp_path / "native").rglob("_accumulator*.so")), "the producer's native loop is built too"
    assert list((tmp_path / "native").rglob("_segment_appender*.so")), "and the native segment append"
    assert list((tmp_path / "native").rglob("_log_read*.so")), "and the native one-call read"
    assert list((tmp_path / "native").rglob("_replica_fetcher*.so")), "and the native replica fetcher"
    for package in ("engine", "engine/segments", "engine/txn", "engine/replication"):  # type hints for users
        assert (tmp_path / "native" / package / "py.typed").is_file(), package
    installed = {p.name for p in (tmp_path / "native").iterdir() if not p.name.endswith(".dist-info")}
    assert installed == {"engine", "bin"} or installed == {"engine"}, f"installed at the top: {sorted(installed)}"
    assert list((source / "build").rglob("_records*.so")), "the first build leaves a .so in build/"

    # same tree, stale build/ still there, no compiler: installs the twin with a warning
    plain = _install(source, tmp_path / "twin", verbose=True, CC="/bin/false")
    assert plain.returncode == 0, plain.stderr
    assert "installing the pure-Python twin only" in plain.stdout + plain.stderr
    assert not list((tmp_path / "twin").rglob("_*.so")), "a stale .so leaked into the install"
    probe = _probe(tmp_path / "twin")
    assert probe.stdout.strip() == "python" and "RuntimeWarning" in probe.stderr

    required = _install(source, tmp_path / "required", CC="/bin/false", KAFKALOG_REQUIRE_EXTENSIONS="1")
    assert required.returncode != 0
    assert "KAFKALOG_REQUIRE_EXTENSIONS=1" in required.stderr + required.stdout
