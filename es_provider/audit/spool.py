"""The index sink's durable spool (Spool): local files of signed JSON lines (lines.py) that take the records the
engine has not taken, shared by the workers of a host and drained oldest file first; and where a spool's folder is
(spool_folder). The host's key the lines are signed under is spool_key.py's, the write-ahead journal in the same
folder journal.py's. Apart because it is files, locks and fsync (blocking code, run in threads) and knows nothing of
sinks or queues.

A drain only ever reads a regular file in the folder itself: the folder is opened without following a symlink, and
each entry relative to it with O_NOFOLLOW | O_NONBLOCK, then checked with fstat; a symlink, a FIFO (whose plain open
would wait for a writer forever), a socket, a device or a file larger than any the spool writes is set aside unread
(renamed `rejected-<name>`), as is a file with refused lines once its good ones are written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_provider.audit.lines import Refusal, cluster_identity, line_key, open_lines, sign
from es_provider.audit.spool_key import DIR_FLAGS, READ_FLAGS, entry_kind, load_key, read_upto, write_all
from es_provider.config.audit import AccessLogSettings

JOURNAL_MARK = "-journal-"  # in a journal file's name (Journal)
REJECTED_KEPT = 20  # set-aside entries kept per folder for an operator to look at; older ones are deleted


class SpoolFull(Exception):
    pass


class NotRegular(Exception):
    """A spool entry that is not a regular file (what it is)."""


@dataclass
class Claimed:
    """A spool file this process drains: locked (no other drain reads it meanwhile), deleted once written (set
    aside instead when some of its lines were refused)."""

    name: str
    fd: int
    records: list[dict[str, Any]]
    refused: dict[Refusal, int] = field(default_factory=dict)
    done: int = 0


@dataclass(frozen=True)
class SetAside:
    """A spool entry not read: its name, why, and what it is called now (None: gone, or it could not be moved)."""

    name: str
    why: str
    kept_as: str | None


def pieces(lines: list[bytes], used: int, limit: int) -> list[tuple[bool, bytes]]:
    """Pure: the lines as writes of whole lines, (to a new file, data), no file growing past `limit` bytes unless a
    single line does; the first continues the open file, which holds `used` bytes (`limit` when none is open)."""
    out: list[tuple[bool, bytes]] = []
    new, size = used >= limit, used if used < limit else 0
    chunk: list[bytes] = []
    for line in lines:
        if size and size + len(line) > limit:
            if chunk:
                out.append((new, b"".join(chunk)))
            new, size, chunk = True, 0, []
        chunk.append(line)
        size += len(line)
    if chunk:
        out.append((new, b"".join(chunk)))
    return out


class Spool:
    """The index sink's durable spool: files `spool-<ns>-<pid>-<random>.jsonl` of signed lines in one folder, which
    the workers of a host share. Each process appends (and fsyncs) only to its own file, holding an exclusive flock
    on it while it may still append; a sealed file (closed, or left by a process that died) is unlocked, and a drain
    claims it by taking that lock, so two drains never hold one file at once. Names sort oldest first."""

    FILE_BYTES = 4 * 1024 * 1024  # a file is sealed at this size: drains come in pieces
    READ_BYTES = 2 * FILE_BYTES  # no file the spool writes is larger (pieces): a larger one is not read

    def __init__(self, directory: Path, max_bytes: int, retention_days: int = 90) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.retention_days = retention_days
        self._key: bytes | None = None
        self._fd: int | None = None
        self._name = ""
        self._bytes = 0
        self._unmovable: set[str] = set()  # entries set aside that could not be renamed: never looked at again
        self.appended_at = 0.0  # monotonic, the last append to the own file

    def line_key(self) -> bytes:
        """This folder's MAC key (the host's key, read once, bound to the folder's name)."""
        if self._key is None:
            self._key = line_key(load_key(self.directory.parent), self.directory.name)
        return self._key

    @contextlib.contextmanager
    def _folder(self, create: bool = False) -> Iterator[int]:
        """The folder, opened without following a symlink, and this user's (FileNotFoundError: none yet)."""
        if create:
            self.directory.parent.mkdir(mode=0o750, parents=True, exist_ok=True)  # records name who was served what
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.directory, 0o750)
        try:
            fd = os.open(self.directory, DIR_FLAGS | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise NotADirectoryError(f"the spool folder {self.directory} is not a folder (a symlink?)") from None
            raise
        try:
            owner = os.fstat(fd).st_uid
            if owner != os.geteuid():
                raise PermissionError(f"the spool folder {self.directory} belongs to uid {owner}, not to this "
                                      "process's user")
            yield fd
        finally:
            os.close(fd)

    def append(self, records: list[dict[str, Any]]) -> None:
        """Signs, appends and fsyncs the records (in a thread: it blocks). Raises SpoolFull or OSError (then nothing
        is kept, unless the records span files and a later file failed: a drain writes those twice, which is one
        record, create-only by id)."""
        with self._folder(create=True) as folder:
            key = self.line_key()
            lines = [sign(key, r) for r in records]
            if self._size(folder) + sum(map(len, lines)) > self.max_bytes:
                raise SpoolFull(f"{self.max_bytes} bytes")
            for new, data in pieces(lines, self._bytes if self._fd is not None else self.FILE_BYTES,
                                    self.FILE_BYTES):
                if new:
                    self._start(folder)
                assert self._fd is not None
                write_all(self._fd, data)
                os.fsync(self._fd)
                self._bytes += len(data)
        self.appended_at = time.monotonic()

    def _start(self, folder: int) -> None:
        self.seal()
        name = f"spool-{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640,
                     dir_fd=folder)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.fsync(folder)  # the new name survives a crash with the lines fsync'd into it
        self._fd, self._name, self._bytes = fd, name, 0

    def seal(self) -> None:
        """Closes the own file (its lock with it): a drain may claim it now."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def open(self) -> bool:
        return self._fd is not None

    @staticmethod
    def _names(folder: int) -> list[str]:
        return sorted(n for n in os.listdir(folder) if n.startswith("spool-") and n.endswith(".jsonl"))

    def files(self) -> list[str]:
        try:
            with self._folder() as folder:
                return self._names(folder)
        except FileNotFoundError:
            return []

    def size(self) -> int:
        try:
            with self._folder() as folder:
                return self._size(folder)
        except FileNotFoundError:
            return 0

    def _size(self, folder: int) -> int:
        """The spool's files' bytes; not the journals' (Journal: bounded by the queue, max_queued records)."""
        total = 0
        for name in self._names(folder):
            if JOURNAL_MARK in name:
                continue
            with contextlib.suppress(FileNotFoundError):  # drained meanwhile
                info = os.stat(name, dir_fd=folder, follow_symlinks=False)
                total += info.st_size if stat.S_ISREG(info.st_mode) else 0
        return total

    def claim(self) -> tuple[Claimed | None, list[SetAside]]:
        """The oldest file no process holds, read and verified (lines.open_lines: its refused lines are counted in
        `refused`); and the entries set aside on the way, unread."""
        set_aside: list[SetAside] = []
        try:
            with self._folder() as folder:
                key = self.line_key()
                for name in self._names(folder):
                    if name in self._unmovable or (name == self._name and self._fd is not None):
                        continue
                    try:
                        fd = self._open_regular(folder, name)
                    except FileNotFoundError:
                        continue
                    except NotRegular as exc:
                        set_aside.append(self._set_aside(folder, name, str(exc)))
                        continue
                    claimed = self._read(folder, name, fd, key, set_aside)
                    if claimed is not None:
                        return claimed, set_aside
        except FileNotFoundError:
            pass
        return None, set_aside

    @staticmethod
    def _open_regular(folder: int, name: str) -> int:
        """The entry opened for reading if it is a regular file (NotRegular says what it is otherwise). Looked at
        before it is opened (a device is never opened), and again after (it may have been swapped meanwhile);
        O_NONBLOCK: a FIFO swapped in between does not wait for a writer."""
        kind = entry_kind(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
        if kind is not None:
            raise NotRegular(kind)
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotRegular("a symbolic link") from None
            raise
        kind = entry_kind(os.fstat(fd).st_mode)
        if kind is not None:
            os.close(fd)
            raise NotRegular(kind)
        return fd

    def _read(self, folder: int, name: str, fd: int, key: bytes, set_aside: list[SetAside]) -> Claimed | None:
        """The file's records if this drain can hold it (None: another holds it, or it is gone or set aside)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.stat(name, dir_fd=folder, follow_symlinks=False).st_ino:
                raise FileNotFoundError(name)  # drained and deleted by another process meanwhile
            data = read_upto(fd, self.READ_BYTES + 1)
            if len(data) > self.READ_BYTES:
                set_aside.append(self._set_aside(folder, name, f"larger than {self.READ_BYTES} bytes, which no "
                                                               "spool file is"))
                raise FileNotFoundError(name)
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        records, refused = open_lines(key, data, dt.datetime.now(dt.UTC), self.retention_days)
        return Claimed(name, fd, records, refused)

    def _set_aside(self, folder: int, name: str, why: str) -> SetAside:
        """Renames the entry `rejected-<name>` (a rename never follows a symlink or opens a FIFO), keeping the
        newest REJECTED_KEPT of them."""
        kept: str | None = f"rejected-{name}"
        try:
            os.rename(name, f"rejected-{name}", src_dir_fd=folder, dst_dir_fd=folder)
        except FileNotFoundError:
            kept = None
        except OSError:
            self._unmovable.add(name)
            kept = None
        rejected = sorted(n for n in os.listdir(folder) if n.startswith("rejected-"))
        for old in rejected[:-REJECTED_KEPT]:
            with contextlib.suppress(OSError):
                os.unlink(old, dir_fd=folder)
        return SetAside(name, why, kept)

    def release(self, claimed: Claimed, written: bool) -> SetAside | None:
        """Ends a claim: a written file is deleted, or set aside when some of its lines were refused (what became
        of it); an unwritten one is kept for the next drain."""
        try:
            if not written:
                return None
            with self._folder() as folder:
                if claimed.refused:
                    return self._set_aside(folder, claimed.name, "some of its lines were refused")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(claimed.name, dir_fd=folder)
                return None
        finally:
            os.close(claimed.fd)


def spool_base(settings: AccessLogSettings) -> Path:
    return Path(settings.spool_dir).expanduser() if settings.spool_dir else Path(
        os.environ.get("ES_PROVIDER_CACHE", "~/.cache/es-provider")).expanduser() / "access-spool"


def spool_folder(settings: AccessLogSettings, nodes: list[str]) -> Path:
    """`<base>/<index>-<cluster>`: one folder per index prefix and cluster (lines.cluster_identity), so a drain
    writes only to its own cluster's daily indices."""
    return spool_base(settings) / f"{settings.index}-{cluster_identity(nodes, settings.index)}"


def leftovers(folder: Path) -> list[tuple[str, int]]:
    """Other folders of the same prefix beside `folder` that hold spool files (another cluster's, an earlier URL's,
    or an earlier version's unkeyed `<index>`): their names and file counts, for the log at start; never drained
    here."""
    prefix = folder.name.rsplit("-", 1)[0]
    same = re.compile(re.escape(prefix) + r"(-[0-9a-f]{16})?")
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder.parent):
            if entry.name != folder.name and same.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    count = sum(1 for n in os.listdir(entry.path) if n.startswith("spool-") and n.endswith(".jsonl"))
                    if count:
                        found.append((entry.name, count))
    return found
