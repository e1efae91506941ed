"""How the service proves who it is to the engine: the `Authorization` header of every request, for basic
authentication (username + password_ref) and Elasticsearch API keys (api_key_ref), from secrets that are re-read
when their `NAME_FILE` changes (a Kubernetes secret rotation), so a new credential is used without a restart; SigV4
is sigv4.py's. Every authorizer is `(method, url, body) -> headers to add`, the shape both clients take. Apart from
connection.py so that a secret lives in one small object whose repr says nothing of it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from es_provider.config.secrets import SecretFileError, read_secret, read_secret_file

log = logging.getLogger("es_provider.engine")
# How often a secret file is looked at (one stat): a rotated credential is in use within this time.
RECHECK_S = 1.0


class Authorizer(Protocol):
    def __call__(self, method: str, url: str, body: bytes | None) -> dict[str, str]: ...


class RotatingSecret:
    """A secret from `$NAME`, or from the file `$NAME_FILE` names, re-read when that file changes (its inode, size
    or modification time, looked at once a second at most). The event loop only looks (one stat); the read runs in a
    thread, bounded (config/secrets.py: a regular file of at most 64 KiB, opened without blocking), and until it is
    done, or when the file cannot be taken (swapped mid-rotation, a FIFO, too large), the last value stays in use and
    the reason is logged once: no request fails or waits for it."""

    def __init__(self, name: str, environ: Mapping[str, str], *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self._value = read_secret(name, environ).decode("utf-8")  # a missing one stops the start, naming it
        self._path = Path(environ[f"{name}_FILE"]) if environ.get(name) is None else None
        self._stamp = self._stamp_now() if self._path is not None else None
        self._checked = clock()
        self._reading = False  # a read in a thread is under way
        self._refused: str | None = None  # the reason last logged, so a lasting one is logged once

    def __repr__(self) -> str:
        return f"RotatingSecret({self.name})"

    def _stamp_now(self) -> tuple[int, int, int] | None:
        assert self._path is not None
        try:
            stat = os.stat(self._path)
        except OSError:
            return None
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def value(self) -> str:
        if self._path is None or self._clock() - self._checked < RECHECK_S:
            return self._value
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
        return self._value

    def _read_done(self, _: object) -> None:
        self._reading = False

    def recheck(self) -> str:
        """Reads the file now (after the engine refused the credential: a rotation may have just landed). Blocking:
        the Connection runs it in a thread."""
        if self._path is None:
            return self._value
        self._checked = self._clock()
        stamp = self._stamp_now()
        if stamp != self._stamp:
            self._reread(stamp)
        return self._value

    def _reread(self, stamp: tuple[int, int, int] | None) -> None:
        assert self._path is not None
        try:
            value = read_secret_file(str(self._path)) or None
            why = None if value is not None else "is empty"
        except SecretFileError as exc:
            value, why = None, str(exc)
        if value is None:
            if why != self._refused:
                log.warning("engine credential: %s_FILE %s; the last value stays in use", self.name, why)
            self._refused = why
            return
        self._stamp = stamp
        self._refused = None
        if value != self._value:
            self._value = value
            log.info("engine credential: %s_FILE changed; the new value is in use", self.name)


class HeaderAuth:
    """A fixed-scheme `Authorization` header from a rotating secret, rebuilt only when the secret changes."""

    def __init__(self, secret: RotatingSecret, render: Callable[[str], str]) -> None:
        self._secret = secret
        self._render = render
        self._seen: str | None = None
        self._headers: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"HeaderAuth({self._secret.name})"

    def renew(self) -> bool:
        """After a 401: whether the secret file holds a new credential now (then the request is worth resending)."""
        return self._secret.recheck() is not self._seen

    def __call__(self, method: str, url: str, body: bytes | None) -> dict[str, str]:
        value = self._secret.value()
        if value is not self._seen:
            self._seen = value
            self._headers = {"authorization": self._render(value)}
        return self._headers


def basic_auth(username: str, password: RotatingSecret) -> HeaderAuth:
    def render(secret: str) -> str:
        return "Basic " + base64.b64encode(f"{username}:{secret}".encode()).decode("ascii")

    return HeaderAuth(password, render)


def api_key_auth(key: RotatingSecret) -> HeaderAuth:
    """Elasticsearch's `ApiKey` scheme: the encoded form as the engine returned it, or `id:key` encoded here (the
    encoded form is base64, which never holds a colon)."""

    def render(secret: str) -> str:
        encoded = base64.b64encode(secret.encode()).decode("ascii") if ":" in secret else secret
        return "ApiKey " + encoded

    return HeaderAuth(key, render)
