"""SASL authentication for the listener: PLAIN (RFC 4616) and SCRAM-SHA-256 (RFC 5802, RFC 7677), as a broker's
SASL listener runs them inside SaslHandshake v1 and SaslAuthenticate requests.

Configuration: `{"mechanisms": [...], "users": {name: password}}`; SCRAM credentials (salt, stored and server keys,
4096 iterations) are derived once when the listener starts, and passwords are not kept for SCRAM. A connection's
exchange state lives in its Authenticator, used by one request at a time. Crash policy: none (no files).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

from engine.common.errors import InvalidConfigurationError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256")
ITERATIONS = 4096


class AuthenticationFailed(Exception):
    """The client's credentials or messages were refused (SASL_AUTHENTICATION_FAILED)."""


class ScramCredential:
    __slots__ = ("salt", "stored_key", "server_key")

    def __init__(self, password: str) -> None:
        self.salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), self.salt, ITERATIONS)
        self.stored_key = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
        self.server_key = _hmac(salted, b"Server Key")


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


class SaslConfig:
    """The mechanisms a listener offers and the users it knows."""

    def __init__(self, settings: dict) -> None:
        if not isinstance(settings, dict) or set(settings) - {"mechanisms", "users"}:
            raise InvalidConfigurationError("sasl must be a dict with 'mechanisms' and 'users'")
        self.mechanisms = list(settings.get("mechanisms", ["PLAIN"]))
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        if unknown or not self.mechanisms:
            raise InvalidConfigurationError(f"SASL mechanisms {unknown or self.mechanisms} are not supported "
                                            f"(supported: {', '.join(MECHANISMS)})")
        users = settings.get("users") or {}
        if not users or not all(isinstance(k, str) and isinstance(v, str) for k, v in users.items()):
            raise InvalidConfigurationError("sasl users must be a non-empty dict of user name to password")
        self._plain = dict(users) if "PLAIN" in self.mechanisms else {}
        self.scram = {u: ScramCredential(p) for u, p in users.items()} if "SCRAM-SHA-256" in self.mechanisms else {}

    def check_plain(self, user: str, password: str) -> bool:
        expected = self._plain.get(user)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())


class Authenticator:
    """One connection's SASL exchange: `step(token) -> reply` until `done`; AuthenticationFailed ends it."""

    def __init__(self, config: SaslConfig, mechanism: str) -> None:
        self.config, self.mechanism = config, mechanism
        self.user: str | None = None
        self.done = False
        self._scram: tuple | None = None  # (client-first-bare, server-first, nonce, credential) between the rounds

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("the exchange is already complete")
        return self._plain(token) if self.mechanism == "PLAIN" else self._scram_step(token)

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed PLAIN message")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if (authzid and authzid != user) or not self.config.check_plain(user, password):
            raise AuthenticationFailed(f"authentication failed for user {user!r}")
        self.user, self.done = user, True
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        if self._scram is None:  # client-first: gs2 header, then n=user,r=nonce
            header, _, bare = text.partition(",")
            _, _, bare = bare.partition(",")
            fields = _attributes(bare)
            if header not in ("n", "y") or "n" not in fields or "r" not in fields:
                raise AuthenticationFailed("malformed SCRAM client-first message")
            user = fields["n"].replace("=2C", ",").replace("=3D", "=")
            cred = self.config.scram.get(user)
            if cred is None:
                raise AuthenticationFailed(f"authentication failed for user {user!r}")
            nonce = fields["r"] + secrets.token_urlsafe(18)
            server_first = f"r={nonce},s={base64.b64encode(cred.salt).decode()},i={ITERATIONS}"
            self._scram, self.user = (bare, server_first, nonce, cred), user
            return server_first.encode()
        bare, server_first, nonce, cred = self._scram
        without_proof, _, proof = text.rpartition(",p=")
        fields = _attributes(without_proof)
        if fields.get("r") != nonce or not proof:
            raise AuthenticationFailed("SCRAM client-final message does not match the exchange")
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        try:
            client_proof = base64.b64decode(proof, validate=True)
        except ValueError:
            raise AuthenticationFailed("malformed SCRAM proof") from None
        signature = _hmac(cred.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(client_proof, signature))
        if len(client_proof) != len(signature) or \
                not hmac.compare_digest(hashlib.sha256(client_key).digest(), cred.stored_key):
            raise AuthenticationFailed(f"authentication failed for user {self.user!r}")
        self.done = True
        return b"v=" + base64.b64encode(_hmac(cred.server_key, auth_message))


def _attributes(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep:
            out.setdefault(key, value)
    return out
