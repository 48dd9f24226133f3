"""How many connections the listener holds, in all and per client address, against Kafka's limits:
`max.connections`, `max.connections.per.ip` and `max.connections.per.ip.overrides`.

No file; no crash policy. Thread-safety: used by the listener's network thread only.
"""
from __future__ import annotations

import ipaddress
import socket
from collections import Counter

from engine.common.errors import InvalidConfigurationError


class ConnectionQuotas:
    """The counts of open connections per address, and whether one more may open."""

    def __init__(self, max_connections: int = 1000, max_connections_per_ip: int | None = None,
                 max_connections_per_ip_overrides: dict[str, int] | None = None) -> None:
        self.max_connections = _bound("max_connections", max_connections, 1)
        self.per_ip = None if max_connections_per_ip is None else _bound("max_connections_per_ip",
                                                                          max_connections_per_ip, 0)
        self.overrides = {}
        for host, limit in (max_connections_per_ip_overrides or {}).items():
            self.overrides[_address(host)] = _bound(f"max_connections_per_ip_overrides[{host!r}]", limit, 0)
        self._open: Counter[str] = Counter()

    def limit_for(self, address: str) -> int | None:
        """The most connections `address` may hold (None: no bound but the global one)."""
        return self.overrides.get(_normal(address), self.per_ip)

    def refusal(self, address: str) -> str | None:
        """Why a new connection from `address` is refused by its address's limit, or None. (The global limit is the
        socket server's: a new connection may take an idle one's place.)"""
        limit = self.limit_for(address)
        if limit is not None and self._open[_normal(address)] >= limit:
            return f"{self._open[_normal(address)]} connections from {address} open (max_connections_per_ip {limit})"
        return None

    def opened(self, address: str) -> None:
        self._open[_normal(address)] += 1

    def closed(self, address: str) -> None:
        key = _normal(address)
        self._open[key] -= 1
        if self._open[key] <= 0:
            del self._open[key]


def _bound(name: str, value, low: int) -> int:
    if type(value) is not int or value < low:
        raise InvalidConfigurationError(f"{name}={value!r} must be an int >= {low}")
    return value


def _normal(address: str) -> str:
    """One spelling per address (an IPv4 address mapped into IPv6 is the IPv4 one)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def _address(host: str) -> str:
    """An override's host (a name is resolved once, as Kafka resolves max.connections.per.ip.overrides)."""
    if not isinstance(host, str) or not host:
        raise InvalidConfigurationError(f"max_connections_per_ip_overrides: {host!r} is not a host")
    try:
        return _normal(str(ipaddress.ip_address(host)))
    except ValueError:
        try:
            return _normal(socket.getaddrinfo(host, None)[0][4][0])
        except socket.gaierror as exc:
            raise InvalidConfigurationError(f"max_connections_per_ip_overrides: cannot resolve {host!r}: {exc}") \
                from None
