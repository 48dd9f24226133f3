"""A child for tests/crash/test_cleaner_kill.py: compact topic `t` of a prepared directory and SIGKILL itself
after the N-th file-system operation of the clean (a write, fsync, rename or remove), so the kill lands at any
step: building the `.cleaned` segment, renaming it to `.swap`, retiring the old segments, the final renames,
or the checkpoint. N larger than the clean's operations lets it finish."""
from __future__ import annotations

import os
import signal
import sys

import engine
from engine import ManualClock
from engine.segments.fs import FileSystem

NOW = 1_800_000_000_000


class KillingFileSystem(FileSystem):
    """Counts the operations that change the directory and dies at the armed one."""

    def __init__(self) -> None:
        super().__init__()
        self.left: int | None = None

    def _step(self) -> None:
        if self.left is not None:
            self.left -= 1
            if self.left <= 0:
                os.kill(os.getpid(), signal.SIGKILL)

    def write(self, f, data):
        self._step()
        return super().write(f, data)

    def writev(self, f, buffers, total):
        self._step()
        return super().writev(f, buffers, total)

    def fsync(self, f):
        self._step()
        return super().fsync(f)

    def fsync_dir(self, path):
        self._step()
        return super().fsync_dir(path)

    def rename(self, src, dst):
        self._step()
        return super().rename(src, dst)

    def remove(self, path):
        self._step()
        return super().remove(path)


def compact(path: str, kill_after: int | None, dedupe: int) -> None:
    fs = KillingFileSystem()
    with engine.open(path, fs=fs, clock=ManualClock(NOW), background=False,
                     cleaner_config={"log_cleaner_dedupe_buffer_size": dedupe}) as e:
        fs.left = kill_after if kill_after is not None else 10**9
        e.compact("t")
        print("steps", 10**9 - fs.left if kill_after is None else None, flush=True)
        fs.left = None


if __name__ == "__main__":
    compact(sys.argv[1], int(sys.argv[2]) if sys.argv[2] != "none" else None, int(sys.argv[3]))
    sys.exit(0)
