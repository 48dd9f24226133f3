"""`Engine.serve()`'s handle: the socket server and the API handlers wired to one engine.

Binding: 127.0.0.1 (or another loopback address) unless `allow_remote=True`; a non-loopback address without TLS
logs one warning. Threads and limits: engine.network.socket_server. close() stops the listener (the engine stays
open); closing the engine closes its listeners first.
"""
from __future__ import annotations

import ipaddress
import logging
import socket

from engine.common.errors import InvalidConfigurationError
from engine.network.kafka_apis import KafkaApis
from engine.network.socket_server import SocketServer

log = logging.getLogger("kafkalog.network")


def _is_loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP))
    except (socket.gaierror, ValueError):
        return False


class Listener:
    """A Kafka protocol listener serving one engine; `address` is (host, port) as bound."""

    def __init__(self, engine, host: str = "127.0.0.1", port: int = 9092, *, allow_remote: bool = False,
                 advertised_host: str | None = None, auto_create_topics: bool = True, default_partitions: int = 1,
                 threads: int = 8, max_connections: int = 1000, request_max_bytes: int = 100 << 20,
                 idle_ms: int = 600_000, ssl_context=None, sasl=None) -> None:
        if sasl is not None:
            raise InvalidConfigurationError("SASL on the listener is not supported yet")
        if ssl_context is not None:
            raise InvalidConfigurationError("TLS on the listener is not supported yet")
        if not _is_loopback(host):
            if not allow_remote:
                raise InvalidConfigurationError(f"the listener binds {host!r}, not a loopback address: pass "
                                                f"allow_remote=True to accept connections from other hosts")
            log.warning("kafkalog listener: %s accepts unauthenticated, unencrypted connections from other hosts",
                        host)
        for name, value, low in (("threads", threads, 1), ("max_connections", max_connections, 1),
                                 ("request_max_bytes", request_max_bytes, 64), ("idle_ms", idle_ms, 1),
                                 ("default_partitions", default_partitions, 1)):
            if type(value) is not int or value < low:
                raise InvalidConfigurationError(f"{name}={value!r} must be an int >= {low}")
        self.engine = engine
        self._server = SocketServer(host, port, self._handle, threads=threads, max_connections=max_connections,
                                    request_max_bytes=request_max_bytes, idle_ms=idle_ms)
        self.address = (self._server.host, self._server.port)
        self._apis = KafkaApis(engine, advertised_host or self._server.host, self._server.port,
                               auto_create_topics=auto_create_topics, default_partitions=default_partitions)
        engine.watch(self._server)

    def _handle(self, request):
        return self._apis.handle(request)

    def on_topic_changed(self, topic: str) -> None:
        """A topic grew or was deleted (the engine tells its clients): remote clients learn it from Metadata."""

    @property
    def bootstrap(self) -> str:
        """`host:port` for a client's bootstrap.servers."""
        return f"{self.address[0]}:{self.address[1]}"

    def close(self) -> None:
        """Stop accepting and serving; connections are closed."""
        self.engine.unwatch(self._server)
        self._server.close()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
