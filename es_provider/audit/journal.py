"""The index sink's write-ahead journal (Journal): every queued record as a signed spool line (lines.py), in files
of the spool's folder (spool.py) that a drain takes once the process that wrote them is dead. Files and locks, on
the loop: one os.write per record, no fsync.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

from es_provider.audit.lines import sign
from es_provider.audit.spool import JOURNAL_MARK, Spool


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
