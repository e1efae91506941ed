"""The index sink's durable spool (Spool): local files of signed JSON lines (lines.py) that take the records the
engine has not taken, shared by the workers of a host and drained oldest file first; the host's spool key
(load_key); and where a spool's folder is (spool_folder). Apart because it is files, locks and fsync (blocking code,
run in threads) and knows nothing of sinks or queues.

A drain only ever reads a regular file in the folder itself: the folder is opened without following a symlink, and
each entry relative to it with O_NOFOLLOW | O_NONBLOCK, then checked with fstat; a symlink, a FIFO (whose plain open
would wait for a writer forever), a socket, a device or a file larger than any the spool writes is set aside unread
(renamed `rejected-<name>`), as is a file with refused lines once its good ones are written.

Its lines, pure (the first part below): a keyed MAC, a space, the record's JSON. A drain takes back only a line this
service's key signed for this spool's cluster, holding an access record's shape, of a time within the retention; a
line anyone else wrote — planted in the folder, copied from another cluster's spool, or signed under a key since
lost — is refused. The MAC is HMAC-SHA256 under a key derived from the host's spool key and the folder's name
(which names the cluster and prefix: cluster_identity), compared in constant time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import hmac
import os
import re
import secrets
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import Field, ValidationError

from es_provider.audit import access
from es_provider.config.audit import AccessLogSettings
from es_provider.core.strictjson import StrictModel

# --- the lines (pure) ---

MAC_HEX = 64  # HMAC-SHA256, hex
SKEW_S = 300.0  # a record's time may be ahead of this host's clock by this much (its worker's clock drifted)
_CONTEXT = b"es-provider access spool v1\x00"  # the subkey is for spool lines only


class Refusal(StrEnum):
    """Why a spooled line is not drained; the reason label of es_provider_access_records_dropped."""

    TORN = "spool_torn"  # the file's last line, without its newline: a crash cut it short
    FORGED = "spool_forged"  # no MAC, or one this service's key did not make for this cluster
    INVALID = "spool_invalid"  # signed, yet not an access record (a bug, never a planted line)
    OUT_OF_WINDOW = "spool_out_of_window"  # older than the retention, or ahead of the clock


def cluster_identity(nodes: Iterable[str], prefix: str) -> str:
    """Which cluster and index prefix a spool belongs to: 16 hex digits of SHA-256 over the nodes' URLs (scheme,
    host, port and path, as the engine client normalized them; in any order) and the prefix. Two services on one
    host with different clusters (or prefixes) never share a folder; URLs hold no credentials (config refuses)."""
    text = "\n".join([*sorted(set(nodes)), "", prefix])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def line_key(key: bytes, folder: str) -> bytes:
    """The MAC key of one spool folder's lines: a line copied into another cluster's folder does not verify."""
    return hmac.new(key, _CONTEXT + folder.encode(), hashlib.sha256).digest()


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def sign(key: bytes, record: dict[str, Any]) -> bytes:
    """One spool line: the MAC of the record's JSON Lines text, a space, that text (newline included)."""
    body = access.json_line(record)
    return _mac(key, body[:-1]) + b" " + body


_Text = Annotated[str, Field(max_length=8192)]


class _Knowledge(StrictModel):
    id: _Text
    version: _Text | None


class _Served(StrictModel):
    knowledge_id: _Text
    document_id: _Text
    chunk_id: _Text
    score: float | None


class SpooledRecord(StrictModel):
    """An access record's shape (access.record's output): every key it writes, of its type; nothing else."""

    time: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")]
    id: Annotated[str, Field(pattern=r"^[0-9a-f]{8,64}$")]
    protocol: _Text
    route: _Text
    method: _Text
    status: Annotated[int, Field(ge=100, le=599)]
    code: _Text
    credential: _Text | None
    app_id: _Text | None
    tenants: list[_Text]
    subject: _Text | None
    acting_subject: _Text | None
    knowledge: list[_Knowledge]
    knowledge_ids: list[_Text]
    documents: list[_Text]
    served: list[_Served]
    remote: _Text
    worker: int
    duration_ms: float
    run_id: _Text | None = None
    trace_id: _Text | None = None
    execution_id: _Text | None = None
    query_hmac: _Text | None = None
    otel_trace_id: _Text | None = None
    otel_span_id: _Text | None = None


def in_window(time_text: str, now: dt.datetime, retention_days: int) -> bool:
    """Whether a record's time is one a drain may write: not in a day the retention sweep deletes (older than
    `retention_days` days, counted as access.expired_indices does) and not ahead of `now` by more than SKEW_S."""
    try:
        moment = dt.datetime.strptime(time_text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return False
    oldest = now.date() - dt.timedelta(days=retention_days - 1)
    return moment.date() >= oldest and moment <= now + dt.timedelta(seconds=SKEW_S)


def open_line(key: bytes, line: bytes, now: dt.datetime, retention_days: int) -> dict[str, Any] | Refusal:
    """A spooled line (without its newline) back to its record, or why it is refused. The MAC is checked before
    the JSON is parsed: nothing of a line this service did not write is read."""
    mac, space, body = line[:MAC_HEX], line[MAC_HEX:MAC_HEX + 1], line[MAC_HEX + 1:]
    if space != b" " or not hmac.compare_digest(mac, _mac(key, body)):
        return Refusal.FORGED
    try:
        record = orjson.loads(body)
        SpooledRecord.model_validate(record)
    except (orjson.JSONDecodeError, ValidationError):
        return Refusal.INVALID
    if not in_window(record["time"], now, retention_days):
        return Refusal.OUT_OF_WINDOW
    return dict(record)


def open_lines(key: bytes, data: bytes, now: dt.datetime, retention_days: int
               ) -> tuple[list[dict[str, Any]], dict[Refusal, int]]:
    """A spool file's records, and how many lines were refused for each reason. The part after the last newline
    (a write a crash cut short) is torn; empty lines are nothing."""
    *whole, rest = data.split(b"\n")
    records: list[dict[str, Any]] = []
    refused: dict[Refusal, int] = {}
    for line in whole:
        if not line:
            continue
        opened = open_line(key, line, now, retention_days)
        if isinstance(opened, Refusal):
            refused[opened] = refused.get(opened, 0) + 1
        else:
            records.append(opened)
    if rest:
        refused[Refusal.TORN] = refused.get(Refusal.TORN, 0) + 1
    return records, refused


# --- the files ---

KEY_NAME = ".spool-key"  # beside the host's spool folders: one key for every worker and every restart
KEY_BYTES = 32
JOURNAL_MARK = "-journal-"  # in a journal file's name (Journal)
REJECTED_KEPT = 20  # set-aside entries kept per folder for an operator to look at; older ones are deleted
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class SpoolFull(Exception):
    pass


class SpoolKeyError(OSError):
    """The spool key cannot be used (says which rule it breaks; never anything of the key)."""


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


def entry_kind(mode: int) -> str | None:
    """Pure: what a directory entry is when it is not a regular file (None when it is)."""
    kinds = ((stat.S_ISREG, None), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
             (stat.S_ISDIR, "a folder"))
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


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


def _read(fd: int, limit: int) -> bytes:
    parts, size = [], 0
    while size < limit:
        part = os.read(fd, min(1 << 20, limit - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def load_key(base: Path) -> bytes:
    """The host's spool key, `<base>/.spool-key`: made (32 random bytes, mode 0600) by the first process that spools
    and read by every other worker and every later start, so what one spooled before a crash is drained after it.
    Made under a temporary name and linked into place, so a concurrent worker reads a whole key or makes none.
    Refused (SpoolKeyError) unless it is a regular file of this user's, readable by no one else, of 32 bytes."""
    directory = os.open(base, _DIR_FLAGS)
    try:
        for _ in range(3):
            try:
                fd = os.open(KEY_NAME, _READ_FLAGS, dir_fd=directory)
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
    key = _read(fd, KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise SpoolKeyError(f"{path} is not {KEY_BYTES} bytes long")
    return key


def _make_key(directory: int) -> None:
    temporary = f"{KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=directory)
    try:
        _write(fd, secrets.token_bytes(KEY_BYTES))
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
            fd = os.open(self.directory, _DIR_FLAGS | os.O_NOFOLLOW)
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
                _write(self._fd, data)
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
            fd = os.open(name, _READ_FLAGS, dir_fd=folder)
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
            data = _read(fd, self.READ_BYTES + 1)
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


@dataclass
class Segment:
    """One journal file: its lines written, and how many of their records the channel has not yet seen taken by the
    index or moved to the spool (`open`)."""

    name: str
    fd: int
    started: float  # monotonic
    lines: int = 0
    bytes: int = 0
    open: int = 0


class Journal:
    """The index sink's write-ahead journal: every queued record, signed as a spool line, appended (one os.write on
    an O_APPEND fd, on the loop, before the answer goes out; no fsync: a killed process loses nothing write(2) took,
    only a machine crash can) to this process's current file `spool-<ns>-<pid>-journal-<random>.jsonl` in the
    spool's folder. Each file is flock'd while this process holds it, so a drain skips it while the process lives
    and claims it like any spool file once it is dead. A file is closed for appends after ROTATE_LINES lines,
    ROTATE_S seconds, FILE_BYTES or a failed write, and deleted once every record in it was taken by the index or
    moved to the spool (settle)."""

    ROTATE_LINES = 1000
    ROTATE_S = 2.0

    def __init__(self, spool: Spool, rotate_lines: int = ROTATE_LINES, rotate_s: float = ROTATE_S) -> None:
        self.spool = spool
        self.rotate_lines = rotate_lines
        self.rotate_s = rotate_s
        self.current: Segment | None = None
        self.closed: list[Segment] = []  # closed for appends, some of their records not yet taken

    def append(self, record: dict[str, Any]) -> Segment:
        """Writes the record's line; the segment that holds it (its `open` counted). Raises OSError (nothing kept:
        a file a write failed in takes no more lines, so a part written is a torn line at most)."""
        segment = self.current
        if segment is not None and (segment.lines >= self.rotate_lines or segment.bytes >= Spool.FILE_BYTES
                                    or time.monotonic() - segment.started >= self.rotate_s):
            self._close_current()
            segment = None
        if segment is None:
            segment = self.current = self._start()
        line = sign(self.spool.line_key(), record)
        try:
            written = os.write(segment.fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, f"{written} of {len(line)} bytes written")
        except OSError:
            self._close_current()
            raise
        segment.lines += 1
        segment.bytes += written
        segment.open += 1
        return segment

    def _start(self) -> Segment:
        with self.spool._folder(create=True) as folder:
            name = f"spool-{time.time_ns():020d}-{os.getpid()}{JOURNAL_MARK}{secrets.token_hex(4)}.jsonl"
            fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o640, dir_fd=folder)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a drain (Spool.claim) skips it while this process lives
        return Segment(name, fd, time.monotonic())

    def _close_current(self) -> None:
        if self.current is not None:
            self.closed.append(self.current)
            self.current = None
        self.settle([])

    def settle(self, segments: list[Segment]) -> list[str]:
        """Each of `segments` has one record fewer to keep (taken by the index, or moved to the spool); the
        segments closed for appends with none left are deleted, as is an idle current one. The names deleted."""
        for segment in segments:
            segment.open -= 1
        current = self.current
        if current is not None and current.open <= 0 and time.monotonic() - current.started >= self.rotate_s:
            self.closed.append(current)
            self.current = None
        done = [s for s in self.closed if s.open <= 0]
        if not done:
            return []
        self.closed = [s for s in self.closed if s.open > 0]
        for segment in done:
            self._delete(segment)
        return [s.name for s in done]

    def _delete(self, segment: Segment) -> None:
        try:  # unlinked before the unlock: no drain claims it meanwhile. One that cannot be (its folder gone or
            # unwritable) is drained once unlocked, its records written again: 409s, one record each.
            with contextlib.suppress(OSError), self.spool._folder() as folder:
                os.unlink(segment.name, dir_fd=folder)
        finally:
            os.close(segment.fd)

    def close(self) -> int:
        """The stop's: deletes the files whose records were all taken; unlocks the others for the next drain (this
        host's next start, or another worker). How many records those hold."""
        self._close_current()
        left = sum(s.open for s in self.closed)
        for segment in self.closed:
            os.close(segment.fd)
        self.closed = []
        return left

    @property
    def files(self) -> list[str]:
        return [s.name for s in ([self.current] if self.current else []) + self.closed]


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
