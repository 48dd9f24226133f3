"""A real Kafka broker for `make interop` and the real-broker benchmark rows: one KRaft node (broker and controller in
one JVM) on 127.0.0.1 with free ports and a fresh data directory, from any Kafka installation.

KAFKA_HOME is either a Kafka distribution (`bin/kafka-server-start.sh`, `bin/kafka-storage.sh`) or a build folder
with the launchers at its top (`kafka-server-start`, `kafka-storage`). `stop()` is a controlled shutdown (SIGTERM):
the broker writes `.kafka_cleanshutdown`; `kill()` is a SIGKILL.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

START_TIMEOUT_S = 180


def launchers(home: str) -> tuple[str, str]:
    """(kafka-server-start, kafka-storage) of the installation at `home`; ValueError naming what is missing."""
    for start, storage in (("bin/kafka-server-start.sh", "bin/kafka-storage.sh"),
                           ("kafka-server-start", "kafka-storage")):
        start, storage = os.path.join(home, start), os.path.join(home, storage)
        if os.access(start, os.X_OK) and os.access(storage, os.X_OK):
            return start, storage
    raise ValueError(f"KAFKA_HOME={home!r} has neither bin/kafka-server-start.sh nor kafka-server-start")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaBroker:
    def __init__(self, home: str, workdir: str, extra: dict | None = None,
                 features: dict[str, int] | None = None) -> None:
        self.start_cmd, self.storage_cmd = launchers(home)
        self.workdir = os.path.abspath(workdir)
        self.data = os.path.join(self.workdir, "data")
        self.port, self.controller_port = _free_port(), _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.properties = os.path.join(self.workdir, "server.properties")
        self.log_path = os.path.join(self.workdir, "broker.out")
        self._proc: subprocess.Popen | None = None
        self.features = dict(features or {})  # kafka-storage format --feature NAME=LEVEL (otherwise its defaults)
        config = {
            "process.roles": "broker,controller", "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": self.data, "num.partitions": 1,
            "offsets.topic.replication.factor": 1, "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1, "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1, "group.initial.rebalance.delay.ms": 0,
            **(extra or {})}
        os.makedirs(self.workdir, exist_ok=True)
        with open(self.properties, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in config.items())

    def format(self) -> None:
        cluster_id = subprocess.run([self.storage_cmd, "random-uuid"], capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1]
        features = [a for name, level in self.features.items() for a in ("--feature", f"{name}={level}")]
        subprocess.run([self.storage_cmd, "format", "-t", cluster_id, "-c", self.properties, *features],
                       capture_output=True, text=True, check=True)

    def start(self) -> "KafkaBroker":
        if not os.path.exists(os.path.join(self.data, "meta.properties")):
            self.format()
        with open(self.log_path, "ab") as out:  # the broker keeps its own copy of the descriptor
            self._proc = subprocess.Popen([self.start_cmd, self.properties], stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the broker exited ({self._proc.returncode}): see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                with open(self.log_path, "rb") as f:
                    if b"Kafka Server started" in f.read():
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.kill()
        raise RuntimeError(f"the broker did not start in {START_TIMEOUT_S} s: see {self.log_path}")

    def stop(self, timeout_s: float = 120) -> None:
        """Controlled shutdown: the broker flushes, writes its checkpoints and `.kafka_cleanshutdown`."""
        if self._proc is None:
            return
        os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self._proc = None

    def kill(self) -> None:
        if self._proc is not None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            self._proc = None

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
