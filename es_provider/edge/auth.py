"""Credentials → Identity. Secrets come only from the environment (or a file an environment variable names),
are compared in constant time, and never leave this module in a log line or an error."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from es_provider.config.secrets import read_secret
from es_provider.config.serving import ApiKey
from es_provider.config.settings import Settings
from es_provider.core.errors import forbidden, protocol_error

_BEARER = "bearer "


@dataclass(frozen=True, slots=True)
class Credentials:
    callback_secrets: dict[str, bytes]  # knowledge id → SparkTide callback secret
    api_keys: tuple[tuple[bytes, ApiKey], ...]


def load_credentials(settings: Settings, environ: Mapping[str, str]) -> Credentials:
    return Credentials(
        callback_secrets={kb.id: read_secret(kb.secret_ref, environ) for kb in settings.knowledge},
        api_keys=tuple((read_secret(key.key_ref, environ), key) for key in settings.api_keys),
    )


def bearer_token(header: str | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` header; None when missing or malformed."""
    if header is None or len(header) <= len(_BEARER) or header[: len(_BEARER)].lower() != _BEARER:
        return None
    token = header[len(_BEARER) :].strip()
    if not token or " " in token:
        return None
    return token.encode("utf-8", "surrogateescape")


def callback_knowledge(credentials: Credentials, token: bytes) -> frozenset[str]:
    """Knowledge ids whose callback secret equals `token`. Every secret is compared, so timing reveals nothing."""
    matched = set()
    for kb_id, secret in credentials.callback_secrets.items():
        if hmac.compare_digest(secret, token):
            matched.add(kb_id)
    return frozenset(matched)


def api_key_for(credentials: Credentials, token: bytes) -> ApiKey | None:
    found: ApiKey | None = None
    for secret, key in credentials.api_keys:
        if hmac.compare_digest(secret, token) and found is None:
            found = key
    return found


def needs_end_user(key: ApiKey) -> bool:
    """Pure: a key with no subject or groups of its own that acts for end users reads, without one named, only what
    everyone may read — on an index whose every document has an ACL, nothing: an empty answer that says nothing."""
    return key.subject is None and not key.groups and bool(key.subjects)


def require_end_user(key: ApiKey, named: str | None, how: str) -> None:
    """Refuses (the protocol's 400) a call of such a key that names no end user; `how`: how the protocol names one."""
    if named is None and needs_end_user(key):
        raise protocol_error(f"this API key has no subject or groups of its own: name the end user ({how})",
                             detail=f"API key {key.key_ref} called without an end user")


def api_key_scope(key: ApiKey, *, tenant_id: str | None = None,
                  subject_id: str | None = None) -> tuple[frozenset[str], str | None]:
    """The tenants and subject an API key acts as, optionally narrowed to one of its tenants or subjects.

    Narrowing outside the key's scope is refused (403), never widened.
    """
    tenants = frozenset(key.tenants)
    if tenant_id is not None:
        if tenant_id and tenant_id not in tenants:
            raise forbidden(detail="tenant outside the API key's scope")
        tenants = frozenset({tenant_id}) if tenant_id else frozenset()
    subject = key.subject
    if subject_id is not None:
        if subject_id != key.subject and subject_id not in key.subjects and "*" not in key.subjects:
            raise forbidden(detail="subject outside the API key's scope")
        subject = subject_id
    return tenants, subject


class ReplayCache:
    """Signatures seen and still inside their window; a second use of one is a replay.

    An entry lives until its own timestamp leaves the window (not "first use + window"): a callback signed for
    the future cannot be replayed once its first use has expired."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._max = max_entries
        self._seen: dict[str, float] = {}

    def first_use(self, signature: str, *, expires_at: float, now: float) -> bool:
        if signature in self._seen and self._seen[signature] >= now:
            return False
        if len(self._seen) >= self._max:
            self._seen = {sig: until for sig, until in self._seen.items() if until >= now}
            if len(self._seen) >= self._max:
                # Full of live entries: refuse rather than forget one (forgetting would allow its replay).
                return False
        self._seen[signature] = expires_at
        return True


_TIMESTAMP = re.compile(r"[0-9]{1,16}", re.ASCII)


def _seconds(timestamp: str) -> float:
    # Timestamps in seconds or milliseconds are both common; accept either.
    ts = int(timestamp)
    return ts / 1000.0 if ts > 10**11 else float(ts)


def _presented(signature: str) -> str:
    return signature.strip().lower().removeprefix("sha256=")


@dataclass(frozen=True, slots=True)
class Signed:
    """A signature `verify_signature` accepted, as a replay store shared by processes (replays.py) keeps it: its
    digest (a name that reveals nothing of it) and the moment its timestamp leaves the window."""

    digest: str
    expires_at: float


def verify_signature(
    secret: bytes,
    *,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    window_s: float,
    future_skew_s: float,
    replays: ReplayCache,
    now: float | None = None,
) -> Signed | None:
    """HMAC-SHA256 over `timestamp + "." + body` (hex), with a timestamp window and one use per signature (in this
    process): the signature accepted, or None.

    Timestamps are ASCII digits only (`"¹⁷".isdigit()` is true in Python, so isdigit() is not enough)."""
    if not timestamp or not signature or _TIMESTAMP.fullmatch(timestamp) is None:
        return None
    now = time.time() if now is None else now
    ts_s = _seconds(timestamp)
    if now - ts_s > window_s or ts_s - now > future_skew_s:
        return None
    expected = hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    presented = _presented(signature).encode("utf-8", "surrogateescape")
    if not hmac.compare_digest(expected.encode("ascii"), presented):
        return None
    if not replays.first_use(expected, expires_at=ts_s + window_s, now=now):
        return None
    return Signed(hashlib.sha256(presented).hexdigest(), ts_s + window_s)
