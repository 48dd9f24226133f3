"""The listener's sockets: one network thread accepts connections, reads request frames and writes response frames;
a pool of request handler threads runs the requests (engine.network.kafka_apis).

Threads: `kafkalog-network` (a selector over the listening socket, every connection and a wake-up socket pair),
`kafkalog-request-handler-N`, and `kafkalog-controller`, which runs the `controller_apis` (topic creation and
deletion: operations that may take seconds) one at a time, as Kafka's controller queues them, so no number of them
ever occupies the handlers that Produce, Fetch or ApiVersions need. A connection has at most one request being
handled (the next is not started until that request's response is queued, as Kafka mutes a channel), so responses go
out in request order. A fetch that finds
nothing to return before its max wait is parked here, not on a handler thread, keyed by its partitions as Kafka's
purgatory keys it: it runs again when the engine appends to one of them (the engine calls `appended`) or at its
deadline, so long polls never hold a handler and an append wakes only its own partition's fetches. A request waiting
for the group coordinator (JoinGroup, SyncGroup) is parked too, woken by its own answer completing.
Limits (Kafka's broker settings in brackets; engine.network.connection_quotas keeps the counts):
- at most `max_connections` connections [max.connections]: a connection past it takes the place of the open one
  idle longest (no request in hand, nothing to send), or is closed when every one is busy, so idle sockets never keep
  a working client out;
- at most `max_connections_per_ip` from one address [max.connections.per.ip], `max_connections_per_ip_overrides`
  for some [max.connections.per.ip.overrides]: past it the new connection is closed;
- a connection idle for `connections_max_idle_ms` is closed [connections.max.idle.ms];
- a request frame larger than `request_max_bytes` [socket.request.max.bytes], or before SASL authentication larger
  than `sasl_max_receive_size` [sasl.server.max.receive.size], closes its connection;
- requests in hand hold at most `queued_max_request_bytes` [queued.max.request.bytes] (None: no bound): a frame that
  does not fit waits in its socket's buffer until earlier ones are answered (one frame is always let through);
- a connection whose unsent responses exceed `max_unsent_bytes` (a client that never reads) is closed.
Each closed connection gets one log line; nothing else is affected. With the `kafkalog.request` logger at DEBUG,
each request handled gets one line too (its API, version, correlation id, client id and peer), as Kafka's request
logger gives. close() stops every thread and closes every
socket.
With an SSL context every connection is TLS: its handshake is driven by the network thread as bytes arrive.
Crash policy: none (no files).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from engine.network.connection_quotas import ConnectionQuotas
from engine.protocol import MalformedRequestError, Request, decode_request

log = logging.getLogger("kafkalog.network")
# Kafka's kafka.request.logger: one DEBUG line per request handled (its record carries `listener`, the bound port)
request_log = logging.getLogger("kafkalog.request")

_SIZE = struct.Struct(">i")
READ_CHUNK = 1 << 16
_WAKE = object()  # the selector key's data of the wake-up socket


class Delayed:
    """What a handler returns for a request to run again later instead of a response: at `deadline`
    (time.monotonic()), or sooner when what it waits for happens: an append to one of `keys` ((topic, partition): a
    fetch waiting for data), or `source` completing (anything with `watch(waker)`, which calls `waker.set()` once it
    is done: a JoinGroup's Pending waiting for its rebalance)."""
    __slots__ = ("deadline", "keys", "source")

    def __init__(self, deadline: float, keys=None, source=None) -> None:
        self.deadline, self.keys, self.source = deadline, keys, source


class _Waker:
    """What a parked request's source calls when it completes: the request is due, and the network thread wakes."""
    __slots__ = ("server", "item")

    def __init__(self, server: "SocketServer", item: list) -> None:
        self.server, self.item = server, item

    def set(self) -> None:
        self.server._make_due(self.item)


class Close:
    """What a handler returns to close the request's connection without a response (one log line says why)."""
    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _outcome(result) -> str:
    """A handler's result in a request-log line."""
    if result is None:
        return "no response"
    if isinstance(result, Delayed):
        return "parked"
    if isinstance(result, Close):
        return f"connection closed: {result.why}"
    if isinstance(result, Exception):
        return f"failed: {result!r}"
    return "answered"


class Session:
    """What the handlers keep about one connection: its SASL state, its peer's address, whether to close it once its
    last queued response is sent (a failed authentication), and what to do when it closes (`on_close`: a share
    session opened on it is closed, as Kafka's broker closes it when its connection goes)."""
    __slots__ = ("authenticated", "authenticator", "close_after_send", "peer", "on_close")

    def __init__(self, authenticated: bool, peer=None) -> None:
        self.authenticated = authenticated
        self.authenticator = None
        self.close_after_send: str | None = None
        self.peer = peer
        self.on_close: dict[object, Callable[[], None]] = {}


class Connection:
    __slots__ = ("sock", "peer", "inbuf", "outbox", "unsent", "busy", "last_active", "closed", "id", "handshaking",
                 "session", "in_hand")

    def __init__(self, sock: socket.socket, peer, now: float, conn_id: int) -> None:
        self.sock, self.peer, self.id = sock, peer, conn_id
        self.inbuf = bytearray()
        self.outbox: deque = deque()   # memoryviews/bytes still to send, in order
        self.unsent = 0
        self.busy = False              # a request of this connection is being handled (or parked)
        self.last_active = now
        self.closed = False
        self.handshaking = isinstance(sock, ssl.SSLSocket)  # a TLS connection before its handshake completes
        self.session = Session(authenticated=True, peer=peer)
        self.in_hand = 0               # the size of the request frame being handled (the memory pool's share)


class SocketServer:
    """Listens on (host, port); `handle(request)` gives a list of response chunks, Delayed, Close, or None (no
    response)."""

    def __init__(self, host: str, port: int, handle: Callable[[Request], object], *, threads: int = 8,
                 quotas: ConnectionQuotas | None = None, request_max_bytes: int = 100 << 20,
                 connections_max_idle_ms: int = 600_000, max_unsent_bytes: int = 256 << 20,
                 sasl_max_receive_size: int = 512 << 10, queued_max_request_bytes: int | None = None,
                 ssl_context: ssl.SSLContext | None = None, authenticate: bool = False,
                 controller_apis: frozenset[int] = frozenset()) -> None:
        self._handle = handle
        self._controller_apis = controller_apis  # run one at a time on the controller thread, never on a handler
        self._authenticate = authenticate  # connections start unauthenticated (SASL)
        self._ssl = ssl_context
        self.quotas = quotas or ConnectionQuotas()
        self.request_max_bytes, self.sasl_max_receive_size = request_max_bytes, sasl_max_receive_size
        self.queued_max_request_bytes = queued_max_request_bytes
        self._queued = 0                        # the bytes of the request frames in hand (network thread only)
        self._waiting_memory: deque = deque()  # connections whose next frame waits for the pool
        self.idle_s, self.max_unsent = connections_max_idle_ms / 1000, max_unsent_bytes
        self._listener = socket.create_server((host, port), reuse_port=False, backlog=128)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._lock = threading.Lock()           # guards _done, _due and _woken (other threads add, the loop takes)
        self._done: list[tuple[Connection, object, Request, int]] = []
        self._parked: list[list] = []  # [deadline, id, connection, request, keys]: network thread only
        self._due: list[list] = []              # parked items whose source completed
        self._watched: dict = {}                # key -> how many parked fetches wait on it (written by the loop only)
        self._woken: set = set()                # keys appended to since the loop last looked
        self._appends = itertools.count(1)
        self._last_append = 0                   # the number of the latest append seen by appended() (any order)
        self._next_idle_check = 0.0
        self._conns: dict[int, Connection] = {}
        self._next_id = 0
        self._stopping = False
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kafkalog-request-handler")
        self._controller = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkalog-controller")
        self._thread = threading.Thread(target=self._run, name="kafkalog-network", daemon=True)
        self._thread.start()

    # --- called from other threads -------------------------------------------------------------------------
    def appended(self, topic: str, partition: int) -> None:
        """An append to (topic, partition) happened (the engine calls this as one of its partition watchers): the
        fetches parked on that partition run again."""
        self._last_append = next(self._appends)  # (a fetch that found nothing just before is run again)
        key = (topic, partition)
        if key in self._watched:
            with self._lock:
                self._woken.add(key)
            self._wake()

    def _make_due(self, item: list) -> None:
        """A parked request's source completed (any thread): it runs again."""
        with self._lock:
            self._due.append(item)
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending (or the server is closing)

    def close(self) -> None:
        """Stop accepting, close every connection, stop the network and handler threads."""
        if self._stopping:
            return
        self._stopping = True
        self._wake()
        self._thread.join()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._controller.shutdown(wait=True, cancel_futures=True)
        for conn in list(self._conns.values()):
            self._close(conn, None)
        self._sel.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    # --- the network thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stopping:
                timeout = 1.0
                if self._parked:
                    timeout = max(0.0, min(timeout, self._parked[0][0] - time.monotonic()))
                for key, events in self._sel.select(timeout):
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        self._drain_wake()
                    else:
                        conn = key.data
                        if events & selectors.EVENT_READ and not conn.closed:
                            self._read(conn)
                        if events & selectors.EVENT_WRITE and not conn.closed:
                            self._flush(conn)
                self._take_done()
                self._rerun_parked()
                self._expire_idle()
        except Exception:  # the listener must say why it stopped
            log.exception("kafkalog listener: the network thread failed")
            raise

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("kafkalog listener: accept failed: %s", exc)
                return
            refused = self.quotas.refusal(peer[0])
            if refused is None and len(self._conns) >= self.quotas.max_connections:
                idle = [c for c in self._conns.values() if not c.busy and not c.outbox]
                if idle:  # the least recently active idle connection makes room (a client reconnects if it must)
                    self._close(min(idle, key=lambda c: c.last_active),
                                f"{self.quotas.max_connections} connections open (max_connections): the one idle "
                                f"longest is closed for a new one")
                else:
                    refused = f"{len(self._conns)} connections open and busy (max_connections)"
            if refused is not None:
                log.warning("kafkalog listener: closing a connection from %s: %s", peer, refused)
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:  # the TLS handshake is driven by _read as bytes arrive
                sock = self._ssl.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            self._next_id += 1
            conn = Connection(sock, peer, time.monotonic(), self._next_id)
            conn.session.authenticated = not self._authenticate
            self._conns[conn.id] = conn
            self.quotas.opened(peer[0])
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self._lock:
            woken, self._woken = self._woken, set()
            due, self._due = self._due, []
        for item in due:
            item[0] = 0.0
        if woken:
            for item in self._parked:  # the fetches parked on a partition appended to look again
                if item[4] and not woken.isdisjoint(item[4]):
                    item[0] = 0.0
        heapq.heapify(self._parked)

    def _read(self, conn: Connection) -> None:
        sock = conn.sock
        try:
            if conn.handshaking:
                sock.do_handshake()
                conn.handshaking = False
            data = sock.recv(READ_CHUNK)
            while isinstance(sock, ssl.SSLSocket) and sock.pending():  # decrypted bytes select() cannot see
                data += sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except ConnectionResetError:
            self._close(conn, None)  # the client hung up (as a clean EOF is: not worth a warning)
            return
        except OSError as exc:
            self._close(conn, f"read failed: {exc}")
            return
        if not data:
            self._close(conn, None)
            return
        conn.inbuf += data
        conn.last_active = time.monotonic()
        if conn.busy and len(conn.inbuf) > 2 * (self.request_max_bytes + 4):
            self._close(conn, "more than two maximal requests sent while one was in hand")
            return
        self._dispatch(conn)

    def _dispatch(self, conn: Connection) -> None:
        """Hand the next whole request frame of `conn` to a handler, unless one is being handled."""
        if conn.busy or len(conn.inbuf) < 4:
            return
        size = _SIZE.unpack_from(conn.inbuf)[0]
        if size < 0 or size > self.request_max_bytes:
            self._close(conn, f"a request frame of {size} bytes (socket.request.max.bytes is "
                              f"{self.request_max_bytes})")
            return
        if not conn.session.authenticated and size > self.sasl_max_receive_size:
            self._close(conn, f"a request frame of {size} bytes before SASL authentication "
                              f"(sasl.server.max.receive.size is {self.sasl_max_receive_size})")
            return
        if len(conn.inbuf) < 4 + size:
            return
        pool = self.queued_max_request_bytes
        if pool is not None and self._queued and self._queued + size > pool:
            if conn not in self._waiting_memory:  # (dispatched again once earlier requests free the pool)
                self._waiting_memory.append(conn)
            return
        frame = bytes(conn.inbuf[4:4 + size])
        del conn.inbuf[:4 + size]
        try:
            request = decode_request(frame)
        except MalformedRequestError as exc:
            self._close(conn, str(exc))
            return
        conn.busy = True
        conn.in_hand = size
        self._queued += size
        request.session = conn.session
        self._submit(conn, request)

    def _submit(self, conn: Connection, request: Request) -> None:
        def run():
            seen = self._last_append
            try:
                result = self._handle(request)
            except Exception as exc:  # a handler bug closes this connection only
                log.exception("kafkalog listener: %s v%d from %s failed", request.api.name, request.version,
                              conn.peer)
                result = exc
            if request_log.isEnabledFor(logging.DEBUG):
                request_log.debug("%s v%d, correlation id %d, client %r, from %s: %s", request.api.name,
                                  request.version, request.correlation_id, request.client_id, conn.peer,
                                  _outcome(result), extra={"listener": self.port})
            with self._lock:
                self._done.append((conn, result, request, seen))
            self._wake()
        (self._controller if request.api.key in self._controller_apis else self._pool).submit(run)

    def _take_done(self) -> None:
        with self._lock:
            done, self._done = self._done, []
        for conn, result, request, seen in done:
            if conn.closed:
                continue
            if isinstance(result, Delayed):
                appended = result.keys is not None and self._last_append != seen  # since the handler looked
                item = [0.0 if appended else result.deadline, id(request), conn, request, result.keys]
                heapq.heappush(self._parked, item)
                for key in result.keys or ():
                    self._watched[key] = self._watched.get(key, 0) + 1
                if result.source is not None:
                    result.source.watch(_Waker(self, item))
                continue
            conn.busy = False
            self._release(conn)
            if isinstance(result, Exception):
                self._close(conn, f"{request.api.name} v{request.version} failed: {result}")
                continue
            if isinstance(result, Close):
                self._close(conn, result.why)
                continue
            if result is not None:
                for chunk in result:
                    conn.outbox.append(memoryview(chunk).cast("B"))
                    conn.unsent += len(chunk)
                if conn.unsent > self.max_unsent:
                    self._close(conn, f"{conn.unsent} bytes of responses unread")
                    continue
                self._flush(conn)
            if not conn.closed:
                self._dispatch(conn)
                if not conn.closed:
                    self._sel.modify(conn.sock, self._events(conn), conn)

    def _release(self, conn: Connection) -> None:
        """The memory pool takes back `conn`'s request frame; connections waiting for it try again."""
        self._queued -= conn.in_hand
        conn.in_hand = 0
        waiting, self._waiting_memory = self._waiting_memory, deque()
        for other in waiting:  # (one that still does not fit queues itself again)
            if not other.closed and not other.busy:
                self._dispatch(other)
                if other.busy:
                    self._sel.modify(other.sock, self._events(other), other)

    def _rerun_parked(self) -> None:
        now = time.monotonic()
        while self._parked and self._parked[0][0] <= now:
            _, _, conn, request, keys = heapq.heappop(self._parked)
            for key in keys or ():
                left = self._watched[key] - 1
                if left:
                    self._watched[key] = left
                else:
                    del self._watched[key]
            if not conn.closed:
                self._submit(conn, request)

    @staticmethod
    def _events(conn: Connection) -> int:
        """What to wait for on `conn`: always readable (reading on while a request is in hand notices a client that
        hangs up during a long poll), writable while responses are queued."""
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0)

    def _flush(self, conn: Connection) -> None:
        while conn.outbox:
            try:
                if conn.handshaking:
                    break
                if isinstance(conn.sock, ssl.SSLSocket):  # (no sendmsg over TLS: one chunk at a time)
                    sent = conn.sock.send(conn.outbox[0])
                else:
                    sent = conn.sock.sendmsg(list(conn.outbox)[:64])
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as exc:
                self._close(conn, f"write failed: {exc}")
                return
            conn.unsent -= sent
            conn.last_active = time.monotonic()
            while sent:
                head = conn.outbox[0]
                if len(head) <= sent:
                    sent -= len(head)
                    conn.outbox.popleft()
                else:
                    conn.outbox[0] = head[sent:]
                    sent = 0
        if not conn.outbox and conn.session.close_after_send:
            self._close(conn, conn.session.close_after_send)
            return
        self._sel.modify(conn.sock, self._events(conn), conn)

    def _expire_idle(self) -> None:
        now = time.monotonic()
        if now < self._next_idle_check:
            return
        self._next_idle_check = now + 1.0
        cutoff = now - self.idle_s
        for conn in [c for c in self._conns.values() if c.last_active < cutoff and not c.busy]:
            self._close(conn, f"idle for {self.idle_s:.0f} s")

    def _close(self, conn: Connection, why: str | None) -> None:
        if conn.closed:
            return
        conn.closed = True
        if why:
            log.warning("kafkalog listener: closing the connection from %s: %s", conn.peer, why)
        if self._conns.pop(conn.id, None) is not None:
            self.quotas.closed(conn.peer[0])
        self._queued -= conn.in_hand
        conn.in_hand = 0
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        for key, call in list(conn.session.on_close.items()):
            try:
                call()
            except Exception:  # (one that fails is logged; the others still run)
                log.exception("kafkalog listener: closing %s of the connection from %s failed", key, conn.peer)
