"""Producer ids of one log directory (Kafka's ProducerIdManager): each handed out once, ever. The catalogue records
the end of the block handed out so far; a new block is recorded before its first id is given.

On disk: `producer_id_block_end` in `kafkalog.metadata` (engine.metadata), saved through the admin manager.
Crash policy: an id is handed out only once the block holding it is saved, so a crash never hands one out twice; the
ids left in a block are skipped after a restart.
Thread-safety: `start`, `allocate` and `cover` are serialised by a lock of their own.
"""
from __future__ import annotations

import threading
from typing import Callable

from engine import metadata
from engine.common.errors import IllegalStateError
from engine.metadata import Catalogue


class ProducerIdManager:
    """Hands out the producer ids of the directory whose catalogue is `catalogue` (`save()` writes it), once started;
    `check_open()` raises once the engine closed."""

    def __init__(self, catalogue: Catalogue, save: Callable[[], None], check_open: Callable[[], None]) -> None:
        self._catalogue, self._save, self._check_open = catalogue, save, check_open
        self._lock = threading.Lock()
        self._next = -1  # (not started)

    def start(self, first: int) -> None:
        """Hand out ids from `first` on (the catalogue's block end, or past every id the directory's logs hold): the
        next one handed out records a new block."""
        with self._lock:
            self._next = first
            self._catalogue.producer_id_block_end = max(self._catalogue.producer_id_block_end, first)

    def allocate(self) -> int:
        """A producer id never handed out before in this directory (persisted a block at a time)."""
        with self._lock:
            self._check_open()
            if self._next < 0:
                raise IllegalStateError("no producer id is handed out before the directory is open")
            pid = self._next
            self._next += 1
            if pid >= self._catalogue.producer_id_block_end:
                self._catalogue.producer_id_block_end = pid + metadata.PRODUCER_ID_BLOCK
                self._save()
            return pid

    def cover(self, highest: int) -> bool:
        """Move the recorded block end past `highest`, an id seen in the logs (a tool may append with an id the
        engine never handed out); whether it moved (the catalogue then needs saving)."""
        with self._lock:
            end = max(self._catalogue.producer_id_block_end, highest + 1)
            moved, self._catalogue.producer_id_block_end = end != self._catalogue.producer_id_block_end, end
            return moved
