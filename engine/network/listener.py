"""`Engine.serve()`'s handle: the socket server and the API handlers wired to one engine.

Binding: 127.0.0.1 (or another loopback address) unless `allow_remote=True`; a non-loopback address without TLS and
SASL logs one warning. `ssl_context` (a server-side ssl.SSLContext with its certificate loaded) makes every connection TLS,
as a broker's SSL listener; `sasl` ({"mechanisms": ["PLAIN", "SCRAM-SHA-256"], "users": {name: password}}) makes
every connection authenticate first (engine.network.sasl), as a SASL_PLAINTEXT or SASL_SSL listener. Threads and
limits (max_connections, max_connections_per_ip and its overrides, connections_max_idle_ms, request_max_bytes,
queued_max_request_bytes, sasl_max_receive_size: Kafka's settings of those names with dots):
engine.network.socket_server. close() stops the listener (the engine stays open); closing the engine closes
its listeners first.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
import ssl

from engine.common.errors import InvalidConfigurationError
from engine.network.connection_quotas import ConnectionQuotas
from engine.network.kafka_apis import KafkaApis
from engine.network.sasl import SaslConfig
from engine.network.socket_server import SocketServer
from engine.protocol import admin_messages as am

log = logging.getLogger("kafkalog.network")
# what Kafka's brokers forward to the controller: run on the listener's controller thread
CONTROLLER_APIS = frozenset({am.CREATE_TOPICS.key, am.DELETE_TOPICS.key, am.CREATE_PARTITIONS.key,
                             am.INCREMENTAL_ALTER_CONFIGS.key, am.ALTER_PARTITION_REASSIGNMENTS.key,
                             am.ELECT_LEADERS.key})


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
                 threads: int = 8, max_connections: int = 1000, max_connections_per_ip: int | None = None,
                 max_connections_per_ip_overrides: dict[str, int] | None = None, request_max_bytes: int = 100 << 20,
                 connections_max_idle_ms: int = 600_000, queued_max_request_bytes: int | None = None,
                 sasl_max_receive_size: int = 512 << 10, ssl_context=None, sasl=None) -> None:
        sasl_config = SaslConfig(sasl) if sasl is not None else None
        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise InvalidConfigurationError(f"ssl_context must be an ssl.SSLContext (server side), got "
                                            f"{type(ssl_context).__name__}")
        if not _is_loopback(host):
            if not allow_remote:
                raise InvalidConfigurationError(f"the listener binds {host!r}, not a loopback address: pass "
                                                f"allow_remote=True to accept connections from other hosts")
            if ssl_context is None or sasl is None:
                log.warning("kafkalog listener: %s accepts %s connections from other hosts", host,
                            " and ".join(w for w, off in (("unencrypted", ssl_context is None),
                                                          ("unauthenticated", sasl is None)) if off))
        for name, value, low in (("threads", threads, 1), ("request_max_bytes", request_max_bytes, 64),
                                 ("connections_max_idle_ms", connections_max_idle_ms, 1),
                                 ("sasl_max_receive_size", sasl_max_receive_size, 64),
                                 ("queued_max_request_bytes", queued_max_request_bytes or 64, 64),
                                 ("default_partitions", default_partitions, 1)):
            if type(value) is not int or value < low:
                raise InvalidConfigurationError(f"{name}={value!r} must be an int >= {low}")
        quotas = ConnectionQuotas(max_connections, max_connections_per_ip, max_connections_per_ip_overrides)
        self.engine = engine
        self._server = SocketServer(host, port, self._handle, threads=threads, quotas=quotas,
                                    request_max_bytes=request_max_bytes,
                                    connections_max_idle_ms=connections_max_idle_ms,
                                    queued_max_request_bytes=queued_max_request_bytes,
                                    sasl_max_receive_size=sasl_max_receive_size, ssl_context=ssl_context,
                                    authenticate=sasl_config is not None, controller_apis=CONTROLLER_APIS)
        self.address = (self._server.host, self._server.port)
        protocol = ("SASL_" if sasl is not None else "") + ("SSL" if ssl_context is not None else "PLAINTEXT")
        self._apis = KafkaApis(engine, advertised_host or self._server.host, self._server.port,
                               auto_create_topics=auto_create_topics, default_partitions=default_partitions,
                               sasl=sasl_config, security_protocol=protocol)
        engine.watch_partitions(self._server)

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
        self._apis.close()
        self._server.close()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
