"""`make run`'s Spark step (engine.tools.demo.spark_step, the code `kafkalog demo` runs) and the README's
Spark block, on the test session; and the one-line failure a worker without kafkalog's native core gives."""
from __future__ import annotations

import contextlib
import io
import re

import pytest

import engine
from engine.record import codec
from engine.spark import source
from engine.tools import demo
from tests.readme_blocks import blocks
from tests.unit.test_readme import _is_spark

pytestmark = pytest.mark.spark


def _produce(directory, n=3_000) -> dict[int, tuple[int, int]]:
    """Keyed records into `events`; (records, value bytes) per partition as the engine sees them."""
    with engine.open(str(directory)) as eng:
        eng.create_topic("events", partitions=3)
        with eng.producer() as p:
            for i in range(n):
                p.send("events", key=b"car-%d" % (i % 37), value=b"value-%d" % i)
        with eng.consumer("events", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
            seen: dict[int, list] = {}
            for r in c:
                seen.setdefault(r.partition, []).append(len(r.value))
        assert [p.log_end_offset for p in eng.describe_topic("events").partitions] == [
            len(seen.get(p, [])) for p in range(3)]
    return {p: (len(v), sum(v)) for p, v in seen.items()}


def test_the_demos_spark_step_prints_the_aggregate(spark, tmp_path):
    expected = _produce(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert demo.spark_step(str(tmp_path), spark=spark) == 0
    found = {int(m.group(1)): (int(m.group(2).replace(",", "")), int(m.group(3).replace(",", "")))
             for m in re.finditer(r"events-(\d+): ([\d,]+) records, ([\d,]+) value bytes", out.getvalue())}
    assert found == expected and len(re.findall(r"partition \d offset \d+: key=", out.getvalue())) == 5
    sampled = int(re.search(r"exactly once: ([\d,]+) records sampled", out.getvalue()).group(1).replace(",", ""))
    assert sampled == sum((records + 9) // 10 for records, _ in expected.values())  # offsets 0, 10, 20, ...


def test_the_readmes_spark_blocks_run(spark, tmp_path, monkeypatch):
    """The Spark section's blocks, in order in one namespace: reading, streaming, writing."""
    spark_blocks = [src for lang, src in blocks() if lang == "python" and _is_spark(src)]
    assert len(spark_blocks) == 3
    _produce(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for block in spark_blocks:
            exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["df"].count() == 3_000 and namespace["spark"] is spark
    assert namespace["query"].lastProgress is not None  # the stream ran
    written = (spark.read.format("kafkalog").option("subscribe", "summary").option("isolation.level", "read_committed")
               .load(str(tmp_path / "data")).collect())
    assert sum(int(r.value) for r in written) == 3_000


def test_a_worker_on_another_build_fails_in_one_line(monkeypatch):
    source.check_worker(codec.IMPL)  # the same build: nothing to say
    monkeypatch.setattr(codec, "LOAD_ERROR", "No module named 'cramjam'")
    with pytest.raises(RuntimeError) as err:
        source.check_worker("cython" if codec.IMPL == "python" else "python")
    message = str(err.value)
    assert "\n" not in message and "No module named 'cramjam'" in message
    assert "engine.spark.use_this_python()" in message and "PYSPARK_PYTHON" in message


def test_the_demos_spark_processes_write_to_its_log_not_the_terminal(tmp_path, capfd):
    """`make run`: Spark's JVM (and the workers it starts) write to the log the demo names; its lines stay alone."""
    import subprocess
    import sys

    log = tmp_path / "spark.log"
    with demo.jvm_output_to(str(log)):
        subprocess.run([sys.executable, "-c", "import sys; print('jvm says'); print('WARN noise', file=sys.stderr)"],
                       check=True)
    print("the demo's line")
    out = capfd.readouterr()
    assert "the demo's line" in out.out and "jvm says" not in out.out and "WARN noise" not in out.err
    assert "jvm says" in log.read_text() and "WARN noise" in log.read_text()
