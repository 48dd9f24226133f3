"""Every README code block runs as written, in order, in one fresh directory (so later blocks see what earlier
ones wrote): Python blocks in a fresh interpreter, shell blocks with bash and this venv's `kafkalog` on PATH.
The block of `make` commands is checked with `make -n` (a dry run: the targets exist and expand), since running
`make test` from inside the tests would recurse; the Spark block runs in tests/spark. The README has no link
that leaves the repository."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.readme_blocks import README, blocks

ROOT = README.parent
BIN = os.path.dirname(sys.executable)


def _is_spark(source: str) -> bool:
    return "pyspark" in source or 'format("kafkalog")' in source


def test_every_non_spark_block_runs_as_written(tmp_path):
    ran = {"python": 0, "sh": 0, "make": 0}
    for lang, source in blocks():
        if lang == "" and source.lstrip().startswith("make "):
            targets = [line.split("#")[0].split()[1] for line in source.splitlines() if line.startswith("make ")]
            out = subprocess.run(["make", "-n", *targets], cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            ran["make"] += 1
        elif lang == "python" and not _is_spark(source):
            out = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=600)
            assert out.returncode == 0, (source[:200], out.stderr)
            ran["python"] += 1
        elif lang == "sh":
            env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
            out = subprocess.run(["bash", "-euo", "pipefail", "-c", source], cwd=tmp_path, capture_output=True,
                                 text=True, timeout=600, env=env)
            assert out.returncode == 0, (source[:200], out.stderr)
            ran["sh"] += 1
    assert ran == {"python": 10, "sh": 1, "make": 1}, ran


def test_no_link_leaves_the_repository():
    text = README.read_text()
    for target in re.findall(r"\]\(([^)]+)\)", text) + re.findall(r"`(\.\./[^`]*)`", text):
        assert not target.startswith(("http", "/", "..")), target
        assert (ROOT / target.split("#")[0]).exists(), target
    assert "../" not in text and "shared/" not in text
    for doc in ("architecture.md", "compatibility.md", "durability.md", "spark.md"):
        assert f"(docs/{doc})" in text and (ROOT / "docs" / doc).exists()


def test_benchmark_tables_are_the_generated_ones():
    """The README's benchmark tables are exactly what bench.readme_tables writes from bench/results/latest.md."""
    from bench import readme_tables

    latest = (ROOT / "bench" / "results" / "latest.md").read_text()
    section = readme_tables.generated_section(README.read_text())
    assert section == readme_tables.render(latest)


def test_the_many_partitions_table_is_the_generated_one():
    """The README's many-partitions table is bench/results/many_partitions.md, as bench.many_partitions wrote it, and
    each verdict in it (one per target and file system) is its figure against the target bench.many_partitions
    holds."""
    import re

    from bench import many_partitions, readme_tables

    written = (ROOT / "bench" / "results" / "many_partitions.md").read_text()
    section = readme_tables.generated_section(README.read_text(), many_partitions.START, many_partitions.END)
    assert section == written.strip("\n")
    rows = [line.split("|")[1:-1] for line in written.splitlines() if line.startswith("| ") and "---" not in line]
    counts = [int(c.split()[0].replace(",", "")) for c in rows[0][1:]]
    verdicts = 0
    for phase, *cells in rows[1:]:
        for n, cell in zip(counts, cells):
            target = many_partitions.TARGETS.get((phase.strip(), n)) or many_partitions.TARGETS.get(
                (phase.strip() + " MiB", n))
            found = re.fullmatch(r"\s*([\d.]+) (?:s|MiB)(?: \(target ≤ ([\d.]+): (met|\*\*not met\*\*)\))?\s*", cell)
            if target is None or found is None:
                continue
            assert float(found.group(2)) == target and (found.group(3) == "met") == (float(found.group(1)) <= target)
            verdicts += 1
    file_systems = len(counts) // len(set(counts))  # (a column per partition count and file system)
    assert verdicts == len(many_partitions.TARGETS) * file_systems, written
