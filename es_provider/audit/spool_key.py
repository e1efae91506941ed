"""The host's spool key (load_key), and the careful opening, reading and writing of a spool folder's entries that
the key and the spool (spool.py) share: a folder opened without following a symlink, an entry opened relative to it
with O_NOFOLLOW | O_NONBLOCK (READ_FLAGS) and looked at with fstat (entry_kind). Files, permissions and fsync:
blocking code, run in threads.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

KEY_NAME = ".spool-key"  # beside the host's spool folders: one key for every worker and every restart
KEY_BYTES = 32
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class SpoolKeyError(OSError):
    """The spool key cannot be used (says which rule it breaks; never anything of the key)."""


def entry_kind(mode: int) -> str | None:
    """Pure: what a directory entry is when it is not a regular file (None when it is)."""
    kinds = ((stat.S_ISREG, None), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
             (stat.S_ISDIR, "a folder"))
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def read_upto(fd: int, limit: int) -> bytes:
    """At most `limit` bytes of the file, read to its end (or the limit)."""
    parts, size = [], 0
    while size < limit:
        part = os.read(fd, min(1 << 20, limit - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def write_all(fd: int, data: bytes) -> None:
    """All of `data`, through as many writes as it takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def load_key(base: Path) -> bytes:
    """The host's spool key, `<base>/.spool-key`: made (32 random bytes, mode 0600) by the first process that spools
    and read by every other worker and every later start, so what one spooled before a crash is drained after it.
    Made under a temporary name and linked into place, so a concurrent worker reads a whole key or makes none.
    Refused (SpoolKeyError) unless it is a regular file of this user's, readable by no one else, of 32 bytes."""
    directory = os.open(base, DIR_FLAGS)
    try:
        for _ in range(3):
            try:
                fd = os.open(KEY_NAME, READ_FLAGS, dir_fd=directory)
            except FileNotFoundError:
                _make_key(directory)
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise SpoolKeyError(f"{base / KEY_NAME} is a symbolic link") from None
                raise
            try:
                return _read_key(fd, base / KEY_NAME)
            finally:
                os.close(fd)
        raise SpoolKeyError(f"{base / KEY_NAME} could not be made")
    finally:
        os.close(directory)


def _read_key(fd: int, path: Path) -> bytes:
    info = os.fstat(fd)
    kind = entry_kind(info.st_mode)
    if kind is not None:
        raise SpoolKeyError(f"{path} is {kind}")
    if info.st_uid != os.geteuid():
        raise SpoolKeyError(f"{path} belongs to uid {info.st_uid}, not to this process's user")
    if info.st_mode & 0o077:
        raise SpoolKeyError(f"{path} may be read or written by others (mode {info.st_mode & 0o777:o}; want 600)")
    key = read_upto(fd, KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise SpoolKeyError(f"{path} is not {KEY_BYTES} bytes long")
    return key


def _make_key(directory: int) -> None:
    temporary = f"{KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=directory)
    try:
        write_all(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, KEY_NAME, src_dir_fd=directory, dst_dir_fd=directory)
    except FileExistsError:
        pass  # another worker's key is in place first: that one is read
    finally:
        os.unlink(temporary, dir_fd=directory)
    os.fsync(directory)
