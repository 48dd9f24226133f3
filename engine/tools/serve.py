"""`kafkalog serve --data DIR --listen HOST:PORT`: open a log directory and serve it to Kafka clients until
interrupted (SIGINT or SIGTERM), then close it cleanly. Prints one line once listening: the bootstrap address."""
from __future__ import annotations

import argparse
import json
import signal
import ssl
import threading

import engine
from engine.common.errors import InvalidConfigurationError
from engine.tools.output import Output


def add_serve(sub) -> None:
    p = sub.add_parser("serve", help="serve the log directory to Kafka clients (the Kafka protocol) until stopped")
    p.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT to listen on (default 127.0.0.1:9092; "
                                                               "port 0 picks a free one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback address (without TLS and SASL, a warning says what is missing)")
    p.add_argument("--ssl-certfile", help="PEM certificate (chain) of a TLS listener (with --ssl-keyfile)")
    p.add_argument("--ssl-keyfile", help="PEM private key of a TLS listener")
    p.add_argument("--sasl-config", help='a JSON file: {"mechanisms": ["PLAIN", "SCRAM-SHA-256"], '
                                          '"users": {"name": "password"}}')
    p.add_argument("--advertised-host", help="the host name clients are told to connect to (default: the bound one)")
    p.add_argument("--no-auto-create-topics", action="store_true",
                   help="refuse Metadata's topic creation (auto.create.topics.enable=false)")
    p.add_argument("--transaction-version", type=int, choices=(0, 1, 2), default=2,
                   help="the transaction.version feature to finalize (default 2, Kafka 4's: clients use transactions "
                        "v2, an epoch bump per transaction; 0 keeps them to transactions v1)")
    limits = p.add_argument_group("connection limits (Kafka's broker settings of the same names)")
    limits.add_argument("--max-connections", type=int, default=1000,
                        help="connections open at once (default 1000); past it, the one idle longest is closed")
    limits.add_argument("--max-connections-per-ip", type=int, help="connections from one address (default: none)")
    limits.add_argument("--max-connections-per-ip-overrides", default="",
                        help="HOST:N,... per-address limits that replace --max-connections-per-ip")
    limits.add_argument("--connections-max-idle-ms", type=int, default=600_000,
                        help="close a connection idle this long (default 600000)")
    limits.add_argument("--queued-max-request-bytes", type=int,
                        help="bytes of requests in hand at once (default: no bound)")
    limits.add_argument("--socket-request-max-bytes", type=int, default=100 << 20,
                        help="the largest request frame (default 104857600)")
    p.set_defaults(func=serve)


def _overrides(text: str) -> dict[str, int]:
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.lstrip("-").isdigit():
            raise InvalidConfigurationError(f"--max-connections-per-ip-overrides: {item!r} is not HOST:N")
        out[host.strip("[]")] = int(count)
    return out


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidConfigurationError(f"--listen {text!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def serve(args: argparse.Namespace, out: Output, stop: threading.Event | None = None) -> int:
    host, port = _address(args.listen)
    context = sasl = None
    if bool(args.ssl_certfile) != bool(args.ssl_keyfile):
        raise InvalidConfigurationError("--ssl-certfile and --ssl-keyfile go together")
    if args.ssl_certfile:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(args.ssl_certfile, args.ssl_keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigurationError(f"cannot load the TLS certificate or key: {exc}") from None
    if args.sasl_config:
        try:
            with open(args.sasl_config, encoding="utf-8") as f:
                sasl = json.load(f)
        except (OSError, ValueError) as exc:
            raise InvalidConfigurationError(f"cannot read --sasl-config {args.sasl_config}: {exc}") from None
    stop = stop or threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        with engine.open(args.data, transaction_config={"transaction_version": args.transaction_version}) as eng:
            listener = eng.serve(host, port, allow_remote=args.allow_remote, advertised_host=args.advertised_host,
                                 auto_create_topics=not args.no_auto_create_topics, ssl_context=context, sasl=sasl,
                                 max_connections=args.max_connections,
                                 max_connections_per_ip=args.max_connections_per_ip,
                                 max_connections_per_ip_overrides=_overrides(args.max_connections_per_ip_overrides),
                                 connections_max_idle_ms=args.connections_max_idle_ms,
                                 queued_max_request_bytes=args.queued_max_request_bytes,
                                 request_max_bytes=args.socket_request_max_bytes)
            out.result({"bootstrap": listener.bootstrap, "data": eng.path},
                       f"kafkalog serving {eng.path} on {listener.bootstrap}")
            out.stream.flush()
            stop.wait()
            listener.close()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0
