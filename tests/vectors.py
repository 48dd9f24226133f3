"""Access to the Kafka-written vectors in tests/data/kafka-written (expected.jsonl per case; see its README)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

from engine.segments import offset_checkpoint

KAFKA_WRITTEN = Path(__file__).resolve().parent / "data" / "kafka-written"
CASES = ["basic-0", "codecs-0", "compacted-0", "multiseg-0", "txn-0"]
METADATA_LOG = KAFKA_WRITTEN / "__cluster_metadata-0.00000000000000000000.log"
KAFKA_CHECKPOINTS = Path(__file__).resolve().parent / "data" / "kafka-checkpoints"  # see its README
OFFSET_CHECKPOINTS = (offset_checkpoint.LOG_START, offset_checkpoint.HIGH_WATERMARK, offset_checkpoint.RECOVERY_POINT,
                      offset_checkpoint.CLEANER)


def case_dir(case: str) -> Path:
    path = KAFKA_WRITTEN / case
    if not path.is_dir():
        raise FileNotFoundError(f"Kafka vectors missing: {path}")
    return path


def expected_lines(path: Path) -> list[dict]:
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().split(b"\n") if line]


def expected(case: str) -> list[dict]:
    return expected_lines(case_dir(case) / "expected.jsonl")


def checkpoint_kind(name: str) -> str:
    """Which of Kafka's readers a checkpoint corpus file is for: "epochs" (LeaderEpochCheckpointFile) or "offsets"."""
    return "epochs" if name.endswith(("leader-epoch-checkpoint", ".epochs")) else "offsets"


def b64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def segments(lines: list[dict]) -> dict[str, dict]:
    """{log file name: {"segment": line, "batches": [(batch line, [record lines])]}} in file order."""
    out: dict[str, dict] = {}
    current = None
    for line in lines:
        kind = line["type"]
        if kind == "segment":
            current = out.setdefault(line["file"], {"segment": line, "batches": []})
        elif kind == "batch":
            current["batches"].append((line, []))
        elif kind == "record":
            current["batches"][-1][1].append(line)
    return out


def all_logs() -> list[tuple[str, Path, list[dict]]]:
    """(label, .log path, expected lines) for every Kafka-written segment, the KRaft one included."""
    out = []
    for case in CASES:
        lines = expected(case)
        for name in segments(lines):
            out.append((f"{case}/{name}", case_dir(case) / name, lines))
    out.append(("__cluster_metadata-0", METADATA_LOG,
                expected_lines(KAFKA_WRITTEN / "__cluster_metadata-0.expected.jsonl")))
    return out
