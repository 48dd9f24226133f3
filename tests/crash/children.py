"""Running a crash test's child process until it is killed: start `python -m <module> <args>`, wait until it
printed enough lines, wait a little longer, SIGKILL it, and return every line it finished."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_until_killed(module: str, args: list[str], lines_before: int, delay: float) -> list[str]:
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    enough = threading.Event()

    def reader():
        for line in proc.stdout:
            lines.append(line)
            if len(lines) >= lines_before:
                enough.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    if not enough.wait(60):
        proc.kill()
        pytest.fail(f"{module} printed fewer than {lines_before} lines: {proc.stderr.read()[-3000:]}")
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    t.join(10)
    return [line for line in lines if line.endswith("\n")]
