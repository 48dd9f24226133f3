"""A Kafka server for test suites: a fresh log directory served on a free loopback port, in this process or in a
child process, started and stopped by the test (engine.testing's README section; the pytest plugin's fixtures use it).

`KafkaServer` is the object; `KafkaContainer` has the shape of Testcontainers' class of that name
(`with KafkaContainer() as kafka: kafka.get_bootstrap_server()`), so a suite migrates by changing its import.

In process (the default), start() opens the directory and listens before it returns; the listener's threads run in
this interpreter. With `process=True`, start() runs `python -m engine.testing.server CONFIG` and returns once the child
prints its bootstrap address; stop() closes the child's stdin, and the child closes its engine cleanly and exits (it
is killed if it has not after `stop_timeout_s`). Either way `logs()` is the server's log: the `kafkalog` loggers'
lines and one line per request handled (the `kafkalog.request` logger at DEBUG, as Kafka's request logger); in a
child, its stderr. After stop() it is what the server logged up to then.

Files: the log directory (a temp directory made by start() and removed by stop(), unless `data_dir` was given), and
for a child process its stderr in a temp file, read and removed by stop(). Crash policy: the engine's; a test that dies leaves a temp directory.
Thread-safety: start() and stop() from one thread; logs() and get_bootstrap_server() from any.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any

from engine.common.errors import IllegalStateError, InvalidConfigurationError

_LOG_LINES = 5000  # the log keeps this many last lines in process
_READY_TIMEOUT_S = 60.0

# Broker settings a test suite sets, by Kafka's name (the way Testcontainers passes them, KAFKA_<NAME> in the
# environment, maps to these) -> the keyword of KafkaServer that carries them.
BROKER_SETTINGS = {
    "auto.create.topics.enable": "auto_create_topics",
    "num.partitions": "default_partitions",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
}
_TRANSACTION_SETTINGS = ("transaction_max_timeout_ms", "transactional_id_expiration_ms",
                         "transaction_abort_timed_out_transaction_cleanup_interval_ms")
_ABORT_CHECK_MS = 1000  # how often the server looks for timed-out transactions (Kafka: 10 s)


class _Lines(logging.Handler):
    """The last lines of the `kafkalog` loggers' records that concern one listener (or no listener in particular)."""

    def __init__(self, port: int) -> None:
        super().__init__(logging.DEBUG)
        self.port = port
        self.lines: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "listener", self.port) == self.port:
            self.lines.append(self.format(record))


class KafkaServer:
    """One kafkalog engine served over the Kafka protocol for a test.

    Options (Kafka's broker settings they stand for in brackets): `auto_create_topics`
    [auto.create.topics.enable], `default_partitions` [num.partitions], `group_initial_rebalance_delay_ms`
    [group.initial.rebalance.delay.ms; 0 by default here, 3000 in Kafka, so a group's first member does not wait],
    `group_min_session_timeout_ms` / `group_max_session_timeout_ms`, `transaction_max_timeout_ms`,
    `transactional_id_expiration_ms`, `transaction_abort_timed_out_transaction_cleanup_interval_ms` [1000 by default
    here, 10,000 in Kafka, so a test of a transaction timeout sees the abort within a second of it],
    `topic_defaults` (topic configs, Kafka's names),
    `ssl_context` (a server-side ssl.SSLContext) and `sasl` ({"mechanisms": [...], "users": {name: password}}), both
    in process only. `port=0` picks a free port.
    """

    def __init__(self, data_dir: str | None = None, *, host: str = "127.0.0.1", port: int = 0, process: bool = False,
                 auto_create_topics: bool = True, default_partitions: int = 1,
                 group_initial_rebalance_delay_ms: int = 0, group_min_session_timeout_ms: int | None = None,
                 group_max_session_timeout_ms: int | None = None, transaction_max_timeout_ms: int | None = None,
                 transactional_id_expiration_ms: int | None = None,
                 transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _ABORT_CHECK_MS,
                 topic_defaults: dict | None = None,
                 ssl_context=None, sasl: dict | None = None, stop_timeout_s: float = 30.0) -> None:
        if process and (ssl_context is not None or sasl is not None):
            raise InvalidConfigurationError("ssl_context and sasl are not supported yet with process=True: "
                                            "serve TLS or SASL in process")
        self._data_dir, self._made_dir = data_dir, None
        self.host, self.port, self.process = host, port, process
        self.stop_timeout_s = stop_timeout_s
        groups = {"group_initial_rebalance_delay_ms": group_initial_rebalance_delay_ms,
                  **_given(group_min_session_timeout_ms=group_min_session_timeout_ms,
                           group_max_session_timeout_ms=group_max_session_timeout_ms)}
        txns = {"transaction_abort_timed_out_transaction_cleanup_interval_ms":
                transaction_abort_timed_out_transaction_cleanup_interval_ms,
                **_given(transaction_max_timeout_ms=transaction_max_timeout_ms,
                         transactional_id_expiration_ms=transactional_id_expiration_ms)}
        self._engine_options: dict[str, Any] = {"group_config": groups, "transaction_config": txns,
                                                "topic_defaults": topic_defaults}
        self._listen_options: dict[str, Any] = {"auto_create_topics": auto_create_topics,
                                                "default_partitions": default_partitions}
        self._tls = {"ssl_context": ssl_context, "sasl": sasl}
        self._engine = self._listener = self._child = self._lines = None
        self._stderr_path: str | None = None
        self._stopped_log = ""  # what logs() gives once stopped
        self._bootstrap: str | None = None
        self._lock = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> "KafkaServer":
        """Open the directory and listen (or start the child and wait for its address). Returns self."""
        with self._lock:
            if self._bootstrap is not None:
                raise IllegalStateError("the server is already started")
            data = self._data_dir or tempfile.mkdtemp(prefix="kafkalog-test-")
            self._made_dir = None if self._data_dir else data
            try:
                if self.process:
                    self._start_child(data)
                else:
                    self._start_here(data)
            except BaseException:
                self._release()
                raise
        return self

    def _start_here(self, data: str) -> None:
        import engine

        self._engine = engine.open(data, **self._engine_options)
        self._listener = self._engine.serve(self.host, self.port, **self._listen_options, **self._tls)
        self._lines = _Lines(self._listener.address[1])
        logging.getLogger("kafkalog").addHandler(self._lines)
        _request_log_users(+1)
        self._bootstrap = self._listener.bootstrap

    def _start_child(self, data: str) -> None:
        config = {"data": data, "host": self.host, "port": self.port, "engine": self._engine_options,
                  "listen": self._listen_options}
        fd, self._stderr_path = tempfile.mkstemp(prefix="kafkalog-test-", suffix=".log")
        with os.fdopen(fd, "wb") as stderr:
            self._child = subprocess.Popen([sys.executable, "-m", "engine.testing.server", json.dumps(config)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        line = _first_line(self._child.stdout, _READY_TIMEOUT_S)
        if not line:
            self._child.kill()
            self._child.wait()
            raise IllegalStateError(f"the kafkalog server process exited before listening:\n{self.logs()}")
        self._bootstrap = json.loads(line)["bootstrap"]

    def stop(self) -> None:
        """Close the engine cleanly (or the child), and remove the directory start() made. Safe to call twice."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        try:
            if self._engine is not None:
                self._engine.close()
            if self._child is not None:
                self._stop_child()
        finally:
            self._stopped_log = self.logs()
            if self._lines is not None:
                logging.getLogger("kafkalog").removeHandler(self._lines)
                _request_log_users(-1)
            if self._stderr_path is not None:
                os.unlink(self._stderr_path)
            self._engine = self._listener = self._child = self._lines = self._stderr_path = None
            self._bootstrap = None
            if self._made_dir:
                shutil.rmtree(self._made_dir, ignore_errors=True)
                self._made_dir = None

    def _stop_child(self) -> None:
        child = self._child
        try:
            child.stdin.close()
            child.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise IllegalStateError(f"the kafkalog server process did not stop within {self.stop_timeout_s} s "
                                    f"(killed)") from None
        finally:
            child.stdout.close()
        if child.returncode != 0:
            raise IllegalStateError(f"the kafkalog server process exited with {child.returncode}:\n{self.logs()}")

    def __enter__(self) -> "KafkaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- what a test uses --------------------------------------------------------------------------------------
    def get_bootstrap_server(self) -> str:
        """`host:port` for a client's bootstrap.servers."""
        if self._bootstrap is None:
            raise IllegalStateError("the server is not started")
        return self._bootstrap

    @property
    def bootstrap_servers(self) -> str:
        return self.get_bootstrap_server()

    @property
    def engine(self):
        """The served engine (in process only): a test may create topics or read logs through it directly."""
        if self._engine is None:
            raise IllegalStateError("the server is not started in this process")
        return self._engine

    @property
    def listener(self):
        """The engine's protocol listener (in process only)."""
        if self._listener is None:
            raise IllegalStateError("the server is not started in this process")
        return self._listener

    @property
    def data_dir(self) -> str | None:
        """The log directory served (None before start() when start() makes one)."""
        return self._data_dir or self._made_dir

    def logs(self) -> str:
        """The server's log so far (in a child process, its stderr); once stopped, its log up to the stop."""
        if self._lines is not None:
            return "\n".join(self._lines.lines)
        if self._stderr_path is not None:
            with open(self._stderr_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        return self._stopped_log


class KafkaContainer(KafkaServer):
    """Testcontainers' `KafkaContainer` in shape, served by kafkalog: no image, no Docker. `image` and `port` are
    accepted and not used (there is no container to pull or map); `with_env("KAFKA_NUM_PARTITIONS", "3")` and the
    other KAFKA_<SETTING> variables of BROKER_SETTINGS set those settings, and any other one is refused, as a
    setting kafkalog cannot honour must never be ignored."""

    def __init__(self, image: str = "kafkalog", port: int = 9093, **options) -> None:
        super().__init__(**options)
        self.image = image

    def with_kraft(self) -> "KafkaContainer":
        """A kafkalog server has no ZooKeeper: KRaft's metadata is the log directory's own (a no-op)."""
        return self

    def with_env(self, key: str, value: str) -> "KafkaContainer":
        name = key.removeprefix("KAFKA_").lower().replace("_", ".") if key.startswith("KAFKA_") else None
        option = BROKER_SETTINGS.get(name or "")
        if option is None:
            known = ", ".join("KAFKA_" + n.upper().replace(".", "_") for n in BROKER_SETTINGS)
            raise InvalidConfigurationError(f"{key} is not supported yet by kafkalog's KafkaContainer (supported: "
                                            f"{known})")
        if option == "auto_create_topics":
            if value.lower() not in ("true", "false"):
                raise InvalidConfigurationError(f"{key}={value!r} must be true or false")
            self._listen_options[option] = value.lower() == "true"
        elif not value.strip().isdigit():
            raise InvalidConfigurationError(f"{key}={value!r} must be a whole number")
        elif option == "default_partitions":
            self._listen_options[option] = int(value)
        else:
            kind = "transaction_config" if option in _TRANSACTION_SETTINGS else "group_config"
            self._engine_options[kind][option] = int(value)
        return self


def _given(**settings) -> dict:
    """The settings that were given (not None): the others keep the engine's defaults."""
    return {name: value for name, value in settings.items() if value is not None}


_request_users = 0
_request_lock = threading.Lock()


def _request_log_users(delta: int) -> None:
    """Servers running in this process turn the request log on (DEBUG) while any runs, and back off after."""
    global _request_users
    with _request_lock:
        _request_users += delta
        logging.getLogger("kafkalog.request").setLevel(logging.DEBUG if _request_users else logging.NOTSET)


def _first_line(stream, timeout_s: float) -> bytes:
    """The first line a child writes to `stream`, or b"" if it closes it or the time runs out."""
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), name="kafkalog-test-ready", daemon=True)
    reader.start()
    reader.join(timeout_s)
    return got[0] if got else b""


def _child_main(config_json: str) -> int:
    """The child process: serve until stdin closes, then close the engine cleanly."""
    config = json.loads(config_json)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafkalog.request").setLevel(logging.DEBUG)
    import engine

    with engine.open(config["data"], **config["engine"]) as eng:
        listener = eng.serve(config["host"], config["port"], **config["listen"])
        sys.stdout.write(json.dumps({"bootstrap": listener.bootstrap}) + "\n")
        sys.stdout.flush()
        sys.stdin.buffer.read()  # until the parent closes it (or dies)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))
