"""Power loss through real system calls: LazyFS (a FUSE file system that keeps every unsynced byte in its own cache
and drops it on `lazyfs::clear-cache`), laid out from the prebuilt binaries in ../shared/tools/lazyfs. A writer
process creates a topic, produces with acks=all and closes cleanly; then the power goes; then a new process counts
what survived. A clean close loses nothing; the same trial through the one syncfs that FUSE ignores loses records,
which shows the trial can see the difference. Where /dev/fuse or the tool is missing, the test says so and skips;
CI sets KAFKALOG_REQUIRE_LAZYFS=1, which makes that a failure."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.crash.children import ROOT

TOOL = ROOT.parent / "shared" / "tools" / "lazyfs"
PARTITIONS, RECORDS = 50, 3001


@pytest.fixture(scope="module")
def lazyfs():
    missing = [what for what, ok in (("/dev/fuse", os.path.exists("/dev/fuse")),
                                     (str(TOOL / "setup-prebuilt.sh"), (TOOL / "setup-prebuilt.sh").exists()),
                                     ("root", os.geteuid() == 0)) if not ok]
    if missing:
        if os.environ.get("KAFKALOG_REQUIRE_LAZYFS") == "1":
            pytest.fail(f"LazyFS trials need {', '.join(missing)}")
        pytest.skip(f"LazyFS trials need {', '.join(missing)}")
    # (LazyFS's own argument parser misreads a path with a dash in it, as pytest's temporary folders have)
    home = Path(tempfile.mkdtemp(prefix="kafkalog_lazyfs_"))
    env = {**os.environ, "LAZYFS_HOME": str(home)}
    for script in (TOOL / "setup-prebuilt.sh", home / "mount.sh"):
        subprocess.run(["bash", str(script)], env=env, check=True, capture_output=True, timeout=300)
    try:
        yield home, env
    finally:
        subprocess.run(["bash", str(home / "umount.sh")], env=env, timeout=60)
        with open("/proc/mounts") as mounts:
            assert str(home / "mnt") not in mounts.read(), "LazyFS is still mounted"
        shutil.rmtree(home)


def _run(*args: str) -> int:
    out = subprocess.run([sys.executable, "-m", "tests.crash.lazyfs_writer", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.split()[-1])


def _trial(lazyfs, name: str, *extra: str) -> tuple[int, int]:
    """(acknowledged, left after a clean close and a power loss)."""
    home, env = lazyfs
    path = str(home / "mnt" / name)
    acked = _run("write", path, str(PARTITIONS), str(RECORDS), *extra)
    subprocess.run(["bash", str(home / "clear-cache.sh")], env=env, check=True, timeout=120)
    return acked, _run("count", path, str(PARTITIONS))


def test_a_clean_close_on_fuse_loses_no_acknowledged_record(lazyfs):
    acked, left = _trial(lazyfs, "clean")
    assert acked == RECORDS
    assert left == acked


def test_the_trial_catches_one_syncfs_on_fuse(lazyfs):
    acked, left = _trial(lazyfs, "one-syncfs", "one-syncfs")
    assert acked == RECORDS
    assert left < acked
