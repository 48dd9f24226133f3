"""kafkalog on real Spark deployments: a standalone cluster (a master and two workers on 127.0.0.1, executors in
processes of their own) running a batch read, a streaming query and a write against a log directory; and a Spark
Connect session reading through the source. Each path (the JVM source when its jar is built, the Python source
with KAFKALOG_SPARK_SOURCE=python) runs both."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine.spark import jvm
from tests.crash.children import ROOT
from tests.spark import cluster

pytestmark = pytest.mark.spark


def _expected_path() -> str:
    if os.environ.get("KAFKALOG_SPARK_SOURCE") == "python":
        return "python"
    import pyspark
    return "jvm" if jvm.problem(pyspark.__version__) is None else "python"


def _run(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.spark.cluster", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_standalone_cluster_reads_streams_and_writes(tmp_path):
    log = tmp_path / "log"
    cluster.write_log(str(log))
    with cluster.standalone(tmp_path, workers=2) as master:
        got = _run("job", master, str(log), str(tmp_path / "out"))
    assert got["path"] == _expected_path()
    assert got["executors"] == 3 and got["worker_pids"] >= 2  # the driver and two executors, tasks in both
    assert got["batch"] and got["stream"] and got["write"], got


def test_register_serves_every_new_session_of_a_process_local_then_cluster(tmp_path):
    """A session stopped and another started in the same process (local, local again, then on the cluster): register()
    brings the source to each one's executors (the jar was once added only to the first context's)."""
    log = tmp_path / "log"
    cluster.write_log(str(log))
    with cluster.standalone(tmp_path, workers=1) as master:
        got = _run("restarted", master, str(log))
    path = _expected_path()
    assert got == {"local": [path, True], "local again": [path, True], "cluster": [path, True]}


def test_a_spark_connect_session_reads_through_the_source(tmp_path):
    """The server starts without kafkalog's jar: register() alone brings the JVM source to the session, and to a
    second session of the same client process once the first is stopped."""
    log = tmp_path / "log"
    cluster.write_log(str(log))
    with cluster.connect_server(tmp_path, None) as url:
        got = _run("connect", url, str(log))
    session = {"path": _expected_path(), "batch": True, "scan": _expected_path()}  # the plan says which
    assert got == {"sessions": [session, session]}
