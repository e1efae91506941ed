"""How the service proves who it is to the engine: the `Authorization` header of every request, for basic
authentication (username or username_ref, + password_ref) and Elasticsearch API keys (api_key_ref), from secrets
that are re-read when their `NAME_FILE` changes (a Kubernetes secret rotation), so a new credential is used without
a restart; SigV4 is sigv4.py's. Every authorizer is `(method, url, body) -> headers to add`, the shape both clients
take. Apart from connection.py so that a secret lives in one small object whose repr says nothing of it.

A rotation fails no request (docs/cluster.md "Rotating the engine's credentials"): a credential read from the files
is tried, and kept once the engine has accepted it (`accepted`); until then the last one that worked stays at hand,
and a request the engine refuses with 401 is resent once with the other one (`refused`). A username and its
password are read together, as one pair, so a request never carries half of a rotation.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

from es_provider.config.secrets import SecretFileError, read_secret, read_secret_file
from es_provider.config.settings import ConfigError

log = logging.getLogger("es_provider.engine")
# How often a secret file is looked at (one stat): a rotated credential is in use within this time.
RECHECK_S = 1.0
# A new credential the engine refused is tried again after this, doubling up to RETRY_MAX_S (the one that worked
# serves meanwhile): often enough to move on soon after it is made on the engine, rarely enough for the engine's
# failed-login limits (the security plugin's auth_failure_listeners) not to block the new user.
RETRY_S = 5.0
RETRY_MAX_S = 60.0
# How often a set of files is read again when one of them changed while it was being read (a swap under way).
READ_TRIES = 3

Stamp = tuple[int, int, int] | None


class Authorizer(Protocol):
    def __call__(self, method: str, url: str, body: bytes | None) -> dict[str, str]: ...


class RotatingSecrets:
    """Secrets read together, each from `$NAME` or from the file `$NAME_FILE` names; the files are re-read when one
    of them changes (its inode, size or modification time, looked at once a second at most), and the values are
    taken only when no file changed while they were read: the set is one consistent reading (Kubernetes swaps all
    files of a Secret at once, through its `..data` link). The event loop only looks (one stat a file); the read
    runs in a thread, bounded (config/secrets.py: a regular file of at most 64 KiB, opened without blocking), and
    until it is done, or when the files cannot be taken (swapped mid-read, a FIFO, too large), the last values stay
    in use and the reason is logged once: no request fails or waits for it."""

    def __init__(self, names: Sequence[str], environ: Mapping[str, str], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.names = tuple(names)
        self._clock = clock
        self._paths = tuple(Path(environ[f"{name}_FILE"]) if environ.get(name) is None and environ.get(
            f"{name}_FILE") else None for name in self.names)
        self._values, self._stamp = self._first(environ)
        self._checked = clock()
        self._reading = False  # a read in a thread is under way
        self._refused: str | None = None  # the reason last logged, so a lasting one is logged once

    def _first(self, environ: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[Stamp, ...]]:
        for _ in range(READ_TRIES):
            before = self._stamp_now()
            values = tuple(read_secret(name, environ).decode("utf-8") for name in self.names)  # a missing one
            if self._stamp_now() == before:  # stops the start, naming it
                return values, before
        raise ConfigError(f"the secret files of {', '.join(self.names)} kept changing while being read at start")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.names)})"

    @property
    def watched(self) -> bool:
        return any(path is not None for path in self._paths)

    def _stamp_now(self) -> tuple[Stamp, ...]:
        return file_stamps(self._paths)

    def values(self) -> tuple[str, ...]:
        """The values in use: the same tuple object until a re-read takes new ones."""
        if not self.watched or self._clock() - self._checked < RECHECK_S:
            return self._values
        self._checked = self._clock()
        stamp = self._stamp_now()
        if stamp != self._stamp and not self._reading:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._reread(stamp)  # no loop (a command): bounded and never blocking, so read here
            else:
                self._reading = True
                loop.run_in_executor(None, self._reread, stamp).add_done_callback(self._read_done)
        return self._values

    def _read_done(self, _: object) -> None:
        self._reading = False

    def recheck(self) -> tuple[str, ...]:
        """Reads the files now if they changed (after the engine refused the credential: a rotation may have just
        landed). Blocking: the Connection runs it in a thread."""
        if not self.watched:
            return self._values
        self._checked = self._clock()
        stamp = self._stamp_now()
        if stamp != self._stamp:
            self._reread(stamp)
        return self._values

    def _reread(self, stamp: tuple[Stamp, ...]) -> None:
        values: tuple[str, ...] | None = None
        why = f"changed {READ_TRIES} times while being read"
        for _ in range(READ_TRIES):
            try:
                read = tuple(self._values[i] if path is None else read_secret_file(str(path))
                             for i, path in enumerate(self._paths))
            except OSError as exc:  # SecretFileError says why; another (EIO) only its kind, never a path
                why = str(exc) if isinstance(exc, SecretFileError) else f"cannot be read ({type(exc).__name__})"
                break
            after = self._stamp_now()
            if after == stamp:  # no file changed while they were read: one consistent set
                values = read
                break
            stamp = after
        if values is not None and not all(values):
            values, why = None, "is empty"
        if values is None:
            if why != self._refused:
                log.warning("engine credential: %s %s; the last value stays in use", self._files(), why)
            self._refused = why
            return
        self._stamp = stamp
        self._refused = None
        if not _same(values, self._values):
            self._values = values
            log.info("engine credential: %s changed", self._files())

    def _files(self) -> str:
        return " + ".join(f"{name}_FILE" for name, path in zip(self.names, self._paths, strict=True)
                          if path is not None)


class RotatingSecret(RotatingSecrets):
    """One secret from `$NAME` or the file `$NAME_FILE` names, re-read when that file changes."""

    def __init__(self, name: str, environ: Mapping[str, str], *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__((name,), environ, clock=clock)
        self.name = name

    def value(self) -> str:
        return self.values()[0]


def file_stamps(paths: Sequence[Path | None]) -> tuple[Stamp, ...]:
    """Each file's (inode, size, modification time), None for no file or a missing one: what says it changed."""
    stamps: list[Stamp] = []
    for path in paths:
        try:
            stat = None if path is None else os.stat(path)  # follows links: Kubernetes' projected files are
        except OSError:  # links through ..data
            stat = None
        stamps.append(None if stat is None else (stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(stamps)


def _same(one: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Constant-time: these are secrets."""
    return len(one) == len(other) and all(
        hmac.compare_digest(a.encode(), b.encode()) for a, b in zip(one, other, strict=True))


class Credential:
    """One reading of the secrets, as the header it makes and the name it goes by in the log (a user, a key's
    id: never the secret)."""

    __slots__ = ("headers", "label", "values")

    def __init__(self, values: tuple[str, ...], headers: dict[str, str], label: str) -> None:
        self.values = values
        self.headers = headers
        self.label = label

    def __repr__(self) -> str:
        return f"Credential({self.label})"


# The credential the last request of this task carried (each request runs in its caller's task), so that a 401 or
# an answer is laid to the credential that earned it, whatever other requests sent meanwhile.
credential_used: ContextVar[Credential | None] = ContextVar("es_provider_engine_credential", default=None)


class HeaderAuth:
    """A fixed-scheme `Authorization` header from rotating secrets, rebuilt only when they change. Holds the
    credential that last worked (`_good`) and a newer one read from the files and not yet accepted by the engine
    (`_fresh`): the newer one is sent, unless the engine refused it lately; then the one that worked is."""

    def __init__(self, secrets: RotatingSecrets, render: Callable[[tuple[str, ...]], str],
                 label: Callable[[tuple[str, ...]], str], *, clock: Callable[[], float] = time.monotonic) -> None:
        self._secrets = secrets
        self._render = render
        self._label = label
        self._clock = clock
        self._seen = secrets.values()
        self._good = self._credential(self._seen)  # at start: the one given
        self._fresh: Credential | None = None
        self._retry_at = 0.0  # when a refused fresh credential is tried again
        self._retry_s = RETRY_S

    def __repr__(self) -> str:
        return f"HeaderAuth({', '.join(self._secrets.names)})"

    def _credential(self, values: tuple[str, ...]) -> Credential:
        return Credential(values, {"authorization": self._render(values)}, self._label(values))

    def __call__(self, method: str, url: str, body: bytes | None) -> dict[str, str]:
        values = self._secrets.values()
        if values is not self._seen:
            self._offer(values)
        credential = self._pick()
        credential_used.set(credential)
        return credential.headers

    def _offer(self, values: tuple[str, ...]) -> None:
        """New values read from the files: the credential to try next (or none, if they are the working one)."""
        self._seen = values
        if _same(values, self._good.values):
            self._fresh = None
        elif self._fresh is None or not _same(values, self._fresh.values):
            self._fresh = self._credential(values)
            self._retry_at, self._retry_s = 0.0, RETRY_S
            log.info("engine credential: trying the new one from %s (%s)", self._files(), self._fresh.label)

    def _pick(self) -> Credential:
        fresh = self._fresh
        return fresh if fresh is not None and self._clock() >= self._retry_at else self._good

    def recheck(self) -> None:
        """After a 401: reads the files now if they changed. Blocking: the Connection runs it in a thread."""
        self._secrets.recheck()

    def refused(self) -> bool:
        """The engine refused (401) the credential this task's request carried: whether another is worth
        resending it with. A new reading of the files first; then the working one for a refused new one; then the
        new one for a refused working one (revoked: the rotation's last step)."""
        used = credential_used.get()
        values = self._secrets.values()
        if values is not self._seen:
            self._offer(values)
        if used is None:
            return False
        if used is self._fresh:
            if self._clock() >= self._retry_at:  # the first refusal of this try: concurrent ones count once
                self._retry_at = self._clock() + self._retry_s
                log.warning("engine credential: the engine refused the new one from %s (%s, 401); the last one "
                            "that worked stays in use, the new one is tried again in %.0f s", self._files(),
                            used.label, self._retry_s)
                self._retry_s = min(RETRY_MAX_S, self._retry_s * 2)
            return True
        if used is self._good and self._fresh is not None:
            if self._retry_at > 0:
                log.info("engine credential: the engine refused the one in use (%s, 401); trying the new one from "
                         "%s (%s)", used.label, self._files(), self._fresh.label)
            self._retry_at = 0.0
            return True
        return self._pick() is not used  # sent with one since replaced: resend with today's

    def accepted(self) -> None:
        """This task's request was answered: if it carried the new credential, that one is the working one now."""
        used = credential_used.get()
        if used is not None and used is self._fresh:
            self._good, self._fresh = used, None
            log.info("engine credential: the new one from %s works and is in use (%s)", self._files(), used.label)

    def _files(self) -> str:
        return " + ".join(self._secrets.names)


def basic_auth(username: str | None, secrets: RotatingSecrets) -> HeaderAuth:
    """Basic authentication: `username` with the one secret (the password), or, with `username` None, the secrets'
    two values as (username, password), read together."""

    def pair(values: tuple[str, ...]) -> tuple[str, str]:
        return (username, values[0]) if username is not None else (values[0], values[1])

    def render(values: tuple[str, ...]) -> str:
        user, password = pair(values)
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")

    return HeaderAuth(secrets, render, lambda values: f"user {pair(values)[0]}")


def api_key_auth(key: RotatingSecrets) -> HeaderAuth:
    """Elasticsearch's `ApiKey` scheme: the encoded form as the engine returned it, or `id:key` encoded here (the
    encoded form is base64, which never holds a colon)."""

    def render(values: tuple[str, ...]) -> str:
        secret = values[0]
        encoded = base64.b64encode(secret.encode()).decode("ascii") if ":" in secret else secret
        return "ApiKey " + encoded

    return HeaderAuth(key, render, lambda values: f"API key id {_key_id(values[0])}")


def _key_id(secret: str) -> str:
    """An API key's id (public: the engine lists and logs it), never its key."""
    if ":" not in secret:
        try:
            secret = base64.b64decode(secret, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return "unknown"
    key_id = secret.split(":", 1)[0] if ":" in secret else ""
    return key_id if key_id.isprintable() and 0 < len(key_id) <= 64 else "unknown"
