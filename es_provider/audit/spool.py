"""The index sink's durable spool (Spool): local JSON Lines files that take the records the engine has not taken,
shared by the workers of a host and drained oldest file first; and where its folder is (spool_folder). Apart
because it is files, locks and fsync (blocking code, run in threads) and knows nothing of sinks or queues.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from pathlib import Path
from typing import Any

import orjson

from es_provider.audit import access
from es_provider.config.audit import AccessLogSettings


class SpoolFull(Exception):
    pass


class Claimed:
    """A spool file this process drains: locked (no other drain reads it meanwhile), deleted once written."""

    def __init__(self, path: Path, fd: int, records: list[dict[str, Any]]) -> None:
        self.path, self.fd, self.records, self.done = path, fd, records, 0


class Spool:
    """The index sink's durable spool: JSON Lines files `spool-<ns>-<pid>-<random>.jsonl` in one folder, which the
    workers of a host share. Each process appends (and fsyncs) only to its own file, holding an exclusive flock on it
    while it may still append; a sealed file (closed, or left by a process that died) is unlocked, and a drain
    claims it by taking that lock, so two drains never hold one file at once. Names sort oldest first."""

    FILE_BYTES = 4 * 1024 * 1024  # a file is sealed at this size: drains come in pieces

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._fd: int | None = None
        self._name = ""
        self._bytes = 0
        self.appended_at = 0.0  # monotonic, the last append to the own file

    def append(self, records: list[dict[str, Any]]) -> None:
        """Appends and fsyncs the records (in a thread: it blocks). Raises SpoolFull or OSError (nothing kept)."""
        data = b"".join(access.json_line(r) for r in records)
        self.directory.mkdir(mode=0o750, parents=True, exist_ok=True)  # records name who was served what
        if self.size() + len(data) > self.max_bytes:
            raise SpoolFull(f"{self.max_bytes} bytes")
        if self._fd is None or self._bytes >= self.FILE_BYTES:
            self.seal()
            name = f"spool-{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
            fd = os.open(self.directory / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o640)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._fd, self._name, self._bytes = fd, name, 0
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)
        self._bytes += len(data)
        self.appended_at = time.monotonic()

    def seal(self) -> None:
        """Closes the own file (its lock with it): a drain may claim it now."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def open(self) -> bool:
        return self._fd is not None

    def files(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.directory) if n.startswith("spool-") and n.endswith(".jsonl"))
        except FileNotFoundError:
            return []

    def size(self) -> int:
        total = 0
        for name in self.files():
            with contextlib.suppress(FileNotFoundError):  # drained meanwhile
                total += (self.directory / name).stat().st_size
        return total

    def claim(self) -> tuple[Claimed | None, int]:
        """The oldest file no process holds, read (lines a crash cut short are skipped: their count is returned)."""
        for name in self.files():
            if name == self._name and self._fd is not None:
                continue
            path = self.directory / name
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino != path.stat().st_ino:
                    raise FileNotFoundError(name)  # drained and deleted by another process meanwhile
                with os.fdopen(os.dup(fd), "rb") as lines:
                    records, torn = _parse_lines(lines.read())
            except (BlockingIOError, FileNotFoundError):
                os.close(fd)
                continue
            return Claimed(path, fd, records), torn
        return None, 0

    @staticmethod
    def release(claimed: Claimed, written: bool) -> None:
        try:
            if written:
                claimed.path.unlink(missing_ok=True)
        finally:
            os.close(claimed.fd)


def _parse_lines(data: bytes) -> tuple[list[dict[str, Any]], int]:
    records, torn = [], 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            torn += 1
            continue
        if isinstance(record, dict) and "id" in record and "time" in record:
            records.append(record)
        else:
            torn += 1
    return records, torn


def spool_folder(settings: AccessLogSettings) -> Path:
    base = Path(settings.spool_dir).expanduser() if settings.spool_dir else Path(
        os.environ.get("ES_PROVIDER_CACHE", "~/.cache/es-provider")).expanduser() / "access-spool"
    return base / settings.index  # one folder per prefix: a drain writes to its own daily indices
