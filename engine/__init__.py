"""kafkalog: an embedded log-structured storage engine whose files are Apache Kafka's own.

`engine.IMPL` says which codec is active: "cython" (the native core) or
"python" (the pure-Python twin). The codec API is re-exported here.
"""
from engine.common.clock import Clock, ManualClock, SystemClock
from engine.common.errors import *  # noqa: F401,F403  (the typed errors are part of the public API)
from engine.common.errors import __all__ as _errors
from engine.common.structs import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)
from engine.record.codec import (
    IMPL,
    Record,
    RecordBatch,
    crc32c,
    decode_columnar,
    encode_batch,
    encode_columnar,
    encode_control_batch,
    iter_batches,
)
from engine.record.columns import BinaryColumn, Columns

__version__ = "0.1.0"
__all__ = [
    "IMPL", "Record", "RecordBatch", "crc32c", "decode_columnar", "encode_batch", "encode_columnar",
    "encode_control_batch", "iter_batches", "BinaryColumn", "Columns", "Clock", "ManualClock", "SystemClock",
    "Engine", "open", "Producer", "Consumer", "TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp",
    "RecordMetadata", "ConsumerGroupMetadata", "ConsumerRebalanceListener", "ConsumerPartitionAssignor",
    "RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "CooperativeStickyAssignor",
    *_errors,
]


# The facade sits above segments/ and txn/, which import engine's leaves: load it on first use, so
# importing a lower layer first (which imports engine.common.errors, and so this package) never cycles.
_FACADE = {"Engine": "engine.engine", "open": "engine.engine", "Producer": "engine.clients.producer",
           "Consumer": "engine.clients.consumer", "ConsumerRebalanceListener": "engine.clients.consumer_coordinator",
           **dict.fromkeys(("ConsumerPartitionAssignor", "RangeAssignor", "RoundRobinAssignor", "StickyAssignor",
                            "CooperativeStickyAssignor"), "engine.groups.assignors")}


def __getattr__(name: str):
    if name in _FACADE:
        import importlib
        return getattr(importlib.import_module(_FACADE[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
