"""kafkalog: an embedded log-structured storage engine whose files are Apache Kafka's own.

`engine.IMPL` says which codec is active: "cython" (the native core) or
"python" (the pure-Python twin). The codec API is re-exported here.
"""
import os as _os

# The lower layers are the folders segments/, txn/ and replication/ beside this package in a source checkout, and
# inside it in an installed wheel (setup.py maps them there): either way they import as engine.segments, engine.txn
# and engine.replication, so an installed kafkalog claims no generic name at the top of site-packages.
_HERE = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_HERE, "segments")):
    __path__.append(_os.path.dirname(_HERE))

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
    "RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "CooperativeStickyAssignor", "ServerAssignor",
    "GroupSpec", "MemberSpec", *_errors,
]


# The facade sits above segments/ and txn/, which import engine's leaves: load it on first use, so
# importing a lower layer first (which imports engine.common.errors, and so this package) never cycles.
_FACADE = {"Engine": "engine.engine", "open": "engine.engine", "Producer": "engine.clients.producer",
           "Consumer": "engine.clients.consumer", "ConsumerRebalanceListener": "engine.clients.consumer_coordinator",
           **dict.fromkeys(("ConsumerPartitionAssignor", "RangeAssignor", "RoundRobinAssignor", "StickyAssignor",
                            "CooperativeStickyAssignor"), "engine.groups.assignors"),
           **dict.fromkeys(("ServerAssignor", "GroupSpec", "MemberSpec"), "engine.groups.server_assignors")}


def __getattr__(name: str):
    if name in _FACADE:
        import importlib
        return getattr(importlib.import_module(_FACADE[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
