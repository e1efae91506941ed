"""Secrets the settings name: each is read from the environment, or from the file `$NAME_FILE` names."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from es_provider.config.settings import ConfigError

# A password, key or token is a few hundred bytes; a client key file a few KiB. A larger file is not a secret
# (a 133 MB one became a 178 MB header on every request).
MAX_SECRET_BYTES = 64 * 1024


class SecretFileError(OSError):
    """A secret file that is not to be read: not a regular file, too large, or unreadable (the reason, never the
    content)."""


def read_secret_file(path: str) -> str:
    """A secret file's text, stripped: a regular file (a symlink to one is fine: Kubernetes projects secrets so) of at
    most MAX_SECRET_BYTES. Opened without blocking, so a FIFO or device in its place is refused, never waited on."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SecretFileError(f"cannot be opened ({exc.strerror})") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise SecretFileError("is not a regular file")
        if status.st_size > MAX_SECRET_BYTES:
            raise SecretFileError(f"is larger than {MAX_SECRET_BYTES} bytes")
        data = os.read(descriptor, MAX_SECRET_BYTES + 1)
        if len(data) > MAX_SECRET_BYTES:
            raise SecretFileError(f"is larger than {MAX_SECRET_BYTES} bytes")
    finally:
        os.close(descriptor)
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SecretFileError("is not UTF-8 text") from None


def read_secret(name: str, environ: Mapping[str, str]) -> bytes:
    """The secret in `$NAME`, or in the file `$NAME_FILE` names (Docker/Kubernetes secrets)."""
    value = environ.get(name)
    if value is None and environ.get(f"{name}_FILE"):
        try:
            value = read_secret_file(environ[f"{name}_FILE"])
        except SecretFileError as exc:
            raise ConfigError(f"secret file named by {name}_FILE cannot be read: it {exc}") from None
    if not value:
        raise ConfigError(f"environment variable {name} (a secret the configuration refers to) is not set")
    return value.encode("utf-8")
