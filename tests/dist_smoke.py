"""`make dist`'s check of the built distributions (run as `python -m tests.dist_smoke DIST_DIR`).

1. The wheel holds one top-level package, `engine` (with the lower layers inside it as engine.segments, engine.txn
   and engine.replication), the native core built, and neither bench/ nor tests/; the sdist holds the sources.
2. A fresh virtual environment outside the repository gets the package index's `segments` and `replication` first,
   then the wheel (with its spark extra): both packages still import and work beside kafkalog, and a smoke runs from
   the wheel: open, produce, consume, the lower layers, the `kafkalog` command, and a Spark read when pyspark is there.
3. `pip uninstall kafkalog` leaves every file of `segments` and `replication` as it was, and both still work.
Any failure raises; the last line printed says what passed.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

NEIGHBOURS = ("segments", "replication")  # generic names on the package index that kafkalog must not touch

SMOKE = r'''
import json, os, subprocess, sys, tempfile
import segments, replication
from segments import Tokenizer
import replication.objects, replication.porcelain
assert Tokenizer()("abc") == "a b c", "the index's segments no longer tokenizes"
site = os.path.dirname(os.path.dirname(segments.__file__))
import engine
from engine.segments.log_config import LogConfig
from engine.log.unified_log import UnifiedLog
from engine.log.log_manager import LogManager
assert os.path.dirname(os.path.dirname(engine.__file__)) == site, engine.__file__
assert engine.IMPL == "cython", engine.IMPL
assert os.path.dirname(engine.segments.__file__) == os.path.join(site, "engine", "segments")
data = tempfile.mkdtemp()
with engine.open(data) as e:
    e.create_topic("t", partitions=2, config={"compression.type": "zstd"})
    with e.producer() as p:
        for i in range(100):
            p.send("t", value=b"v%d" % i, key=b"k%d" % (i % 7))
    with e.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        assert sorted(r.value for r in c) == sorted(b"v%d" % i for i in range(100))
cli = os.path.join(os.path.dirname(sys.executable), "kafkalog")
listed = subprocess.run([cli, "topics", "--data", data, "--list"], capture_output=True, text=True, check=True)
assert listed.stdout.split() == ["t"], listed
spark = "no pyspark"
try:
    import pyspark
except ImportError:
    pyspark = None
if pyspark is not None:
    import engine.spark
    engine.spark.use_this_python()
    from pyspark.sql import SparkSession
    s = (engine.spark.configure(SparkSession.builder).master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    path = engine.spark.register(s)
    assert path == ("jvm" if os.path.exists(engine.spark.jvm.JAR) else "python"), path
    rows = s.read.format("kafkalog").option("subscribe", "t").load(data).count()
    assert rows == 100, rows
    s.stop()
    spark = f"Spark read 100 rows through the {path} source"
print(json.dumps({"engine": engine.__file__, "spark": spark}))
'''

AFTER = r'''
import segments, replication.objects
from segments import Tokenizer
assert Tokenizer()("abc") == "a b c"
try:
    import engine
except ImportError:
    print("kafkalog is gone; segments and replication work")
else:
    raise SystemExit(f"engine still imports from {engine.__file__}")
'''


def _run(*args, cwd: str | None = None) -> str:
    out = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        said = [line for line in (out.stdout + out.stderr).splitlines() if not line.startswith("\tat ")]
        raise SystemExit(f"{args[0]} {args[1]} ... failed ({out.returncode}):\n" + "\n".join(said[-60:]))
    return out.stdout


def check_wheel(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    info = next(t for t in tops if t.endswith(".dist-info"))
    assert tops == {"engine", info}, f"the wheel installs {sorted(tops)} at the top"
    top_level = zipfile.ZipFile(wheel).read(f"{info}/top_level.txt").decode().split()
    assert top_level == ["engine"], top_level
    for layer in ("segments", "txn", "replication"):
        assert f"engine/{layer}/__init__.py" in names, f"engine.{layer} is missing"
    for module in ("_records", "_records_builder", "_columnar", "_log_scan", "_log_validator", "_cleaner_records"):
        assert any(n.startswith(f"engine/_native/{module}.") and n.endswith(".so") for n in names), f"no {module}"
    assert not any(n.startswith(("bench/", "tests/")) for n in names)
    if shutil.which("javac") or os.environ.get("JAVA_HOME"):  # setup built the JVM source: the wheel carries it
        assert "engine/spark/jvm/kafkalog-spark.jar" in names, "the wheel lacks kafkalog-spark.jar"


def check_sdist(sdist: Path) -> None:
    names = tarfile.open(sdist).getnames()
    for path in ("setup.py", "pyproject.toml", "engine/_native/_records.pyx", "engine/_native/_codec.pxd",
                 "segments/local_log.py", "engine/log/unified_log.py", "replication/partition.py",
                 "engine/spark/jvm/src/kafkalog/spark/KafkalogTable.java"):
        assert any(n.split("/", 1)[-1] == path for n in names), f"the sdist lacks {path}"


def _record(site: Path, dist: str) -> dict[str, str]:
    """path -> sha256 of every file an installed distribution's RECORD lists with a hash."""
    info = next(site.glob(f"{dist}-*.dist-info"))
    with open(info / "RECORD", newline="") as f:
        return {row[0]: row[1] for row in csv.reader(f) if len(row) > 1 and row[1]}


def _sha256(path: Path) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def main(dist_dir: str) -> None:
    dist = Path(dist_dir).resolve()
    (wheel,) = dist.glob("kafkalog-*.whl")
    (sdist,) = dist.glob("kafkalog-*.tar.gz")
    check_wheel(wheel)
    check_sdist(sdist)
    with tempfile.TemporaryDirectory(prefix="kafkalog-dist-") as tmp:
        env_dir, work = Path(tmp) / "venv", Path(tmp) / "work"
        work.mkdir()
        venv.create(env_dir, with_pip=True)
        py = env_dir / "bin" / "python"
        _run(py, "-m", "pip", "install", "-q", *NEIGHBOURS, cwd=str(work))
        site = Path(_run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
        before = {d: _record(site, d) for d in NEIGHBOURS}
        _run(py, "-m", "pip", "install", "-q", f"{wheel}[spark]", cwd=str(work))
        smoke = _run(py, "-c", SMOKE, cwd=str(work)).strip().splitlines()[-1]
        _run(py, "-m", "pip", "check", cwd=str(work))
        _run(py, "-m", "pip", "uninstall", "-y", "-q", "kafkalog", cwd=str(work))
        for d, files in before.items():
            changed = [p for p, h in files.items() if not (site / p).is_file() or _sha256(site / p) != h]
            assert not changed, f"uninstalling kafkalog changed {d}'s files: {changed[:5]}"
        after = _run(py, "-c", AFTER, cwd=str(work)).strip()
    print(f"dist: {wheel.name} and {sdist.name}: one top-level package (engine); beside the index's "
          f"{' and '.join(NEIGHBOURS)}: {smoke}; after uninstall: {after}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "dist")
