"""A partition's log as its log manager holds it: a LogSlot, one per partition directory, never replaced, whose state
is one of two objects: `Unloaded` (what the checkpoints said of the log; nothing open, nothing read) or the loaded
UnifiedLog. A directory of many partitions opens with every slot unloaded; `load()` is the one call that loads, by
whichever thread asks first (the others wait for it), and returns the log. Nothing else loads: `loaded`,
`loaded_log`, `config`, `cleaner_checkpoint` and `replace_unloaded()` read or change the slot as it is, so a look
over every slot (a checkpoint, the cleaner's choice, a description) costs no I/O.
Loading runs `Loading.on_load` (the log manager's: the topic id check, the loaded set) on the loaded log before it is
published, in one assignment of the slot's state.
Byte layout: none of its own (the log's files are engine.log.unified_log's and segments'). Crash policy: loading is
the log's recovery (UnifiedLog's constructor); a load that raises leaves the slot unloaded, notes the failure in
`Loading.failed` (no clean-shutdown marker then) and raises to its caller; a slot closed before it loaded never loads.
Thread-safety: loads, closes and `replace_unloaded()` of one slot are serialized by its lock; reads
of the state take no lock (the state is replaced whole).
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

from engine.common.errors import KafkaStorageError
from engine.log.unified_log import UnifiedLog
from engine.segments.log_config import LogConfig


class Loading:
    """What the slots of one log manager share: `configs(topic)` gives a log's config as it loads, `options` the rest
    of UnifiedLog's arguments, and `on_load(slot, log)` runs with the slot and its loaded log before anyone else sees
    that; it may refuse it by raising (the slot stays unloaded) or return another log to take its place (a directory
    set aside and made again). Once `closed`, no slot of it loads; `failed` says that a load raised (the log is not
    usable as it is: a clean-shutdown marker must not say otherwise)."""

    __slots__ = ("configs", "options", "on_load", "closed", "failed")

    def __init__(self, configs: Callable[[str], LogConfig], options: dict,
                 on_load: Callable[[LogSlot, UnifiedLog], UnifiedLog | None] | None = None) -> None:
        self.configs, self.options, self.on_load = configs, options, on_load
        self.closed = self.failed = False


class Unloaded:
    """A slot's state before its log loads: the offsets its checkpoints gave, the cleaner's checkpoint, and the
    directory's files where they are known (a directory the log manager just made: its load need not list it)."""

    __slots__ = ("recovery_point", "log_start_offset", "high_watermark", "clean_shutdown", "cleaner_checkpoint",
                 "listing")

    def __init__(self, recovery_point: int, log_start_offset: int, high_watermark: int, clean_shutdown: bool,
                 cleaner_checkpoint: int | None, listing: Sequence[str] | None) -> None:
        self.recovery_point, self.log_start_offset = recovery_point, log_start_offset
        self.high_watermark, self.clean_shutdown = high_watermark, clean_shutdown
        self.cleaner_checkpoint, self.listing = cleaner_checkpoint, listing


class LogSlot:
    """One partition directory's log, unloaded or loaded (see the module docstring)."""

    __slots__ = ("fs", "dir", "clock", "topic", "_shared", "_state", "_lock", "_closed")

    def __init__(self, fs, directory: str, topic: str, clock, shared: Loading, *, recovery_point: int = 0,
                 log_start_offset: int = 0, high_watermark: int = 0, clean_shutdown: bool = False,
                 cleaner_checkpoint: int | None = None, listing: Sequence[str] | None = None) -> None:
        """The slot of the log in `directory`, a partition directory of `topic`, unloaded (`listing`: the directory's
        files, where the caller knows them: it just made the directory)."""
        self.fs, self.dir, self.topic, self.clock, self._shared = fs, directory, topic, clock, shared
        self._state: Unloaded | UnifiedLog = Unloaded(recovery_point, log_start_offset, high_watermark,
                                                      clean_shutdown, cleaner_checkpoint, listing)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def loaded(self) -> bool:
        return type(self._state) is not Unloaded

    @property
    def loaded_log(self) -> UnifiedLog | None:
        """The log if it is loaded; None (and nothing loaded) otherwise."""
        state = self._state
        return None if type(state) is Unloaded else state

    @property
    def config(self) -> LogConfig:
        """The log's config: the loaded log's, else its topic's (which it takes as it loads)."""
        state = self._state
        return self._shared.configs(self.topic) if type(state) is Unloaded else state.config

    @property
    def cleaner_checkpoint(self) -> int | None:
        """The first dirty offset the last clean left (None: never cleaned)."""
        return self._state.cleaner_checkpoint

    def load(self) -> UnifiedLog:
        """The log, loaded now if it was not (KafkaStorageError once the slot or its manager closed first)."""
        state = self._state
        if type(state) is not Unloaded:
            return state
        with self._lock:
            state = self._state
            if type(state) is not Unloaded:
                return state  # another thread loaded it meanwhile
            shared = self._shared
            if self._closed or shared.closed:
                raise KafkaStorageError("the log was closed before it was loaded", file=self.dir)
            try:
                log = UnifiedLog(self.fs, self.dir, shared.configs(self.topic), self.clock,
                                 recovery_point=state.recovery_point, log_start_offset=state.log_start_offset,
                                 high_watermark=state.high_watermark, clean_shutdown=state.clean_shutdown,
                                 cleaner_checkpoint=state.cleaner_checkpoint, listing=state.listing, **shared.options)
            except BaseException:
                shared.failed = True
                raise
            try:  # (on the loaded log, before anyone else can see it)
                if shared.on_load is not None:
                    log = shared.on_load(self, log) or log
            except BaseException:
                log.close(flush=False)
                raise
            self._state = log
            return log

    def load_if_open(self) -> None:
        """load(), unless the slot or its manager closed first (then nothing)."""
        if type(self._state) is Unloaded and not self._closed and not self._shared.closed:
            self.load()

    def replace_unloaded(self, swap: Callable[[], None]) -> bool:
        """While the log is still unloaded (no load can start meanwhile), run `swap()`, which puts other files in its
        directory, and forget the checkpointed offsets: its first load re-validates every segment. False, nothing
        run, once it is loaded or closed."""
        with self._lock:
            state = self._state
            if type(state) is not Unloaded or self._closed:
                return False
            swap()
            state.recovery_point = state.log_start_offset = state.high_watermark = 0
            state.clean_shutdown, state.listing = False, None
            return True

    def close(self, flush: bool = True) -> None:
        """Close the log (UnifiedLog.close) if it is loaded; an unloaded one holds nothing, and never loads after."""
        with self._lock:
            self._closed = True
            state = self._state
        if type(state) is not Unloaded:
            state.close(flush)

    def __repr__(self) -> str:
        state = self._state
        return f"LogSlot({self.dir}, not loaded)" if type(state) is Unloaded else f"LogSlot({state!r})"
