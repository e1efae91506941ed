"""The index sink's write-ahead journal (audit/journal.py, channel.py, recorder.py): which journal files are
kept and which deleted as records are taken (table-driven), that a drain skips a live process's journal and takes
a dead one's, and that a journal that cannot be written is the sink failing (refused, or counted)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from helpers.recording import FlakySink, folder, record, recorder, settings, until

from es_provider.audit.journal import Journal, Segment
from es_provider.audit.lines import open_lines
from es_provider.audit.spool import Spool

# rotate_lines, rotate_s, records appended (0..n-1), taken (by index, in this order), closed, files left, lines in
# them, records the stop left in them
TABLE = [
    (3, 1000.0, 5, [], False, 2, 5, 0),
    (3, 1000.0, 5, [0, 1, 2], False, 1, 2, 0),  # the first file's records all taken: deleted
    (3, 1000.0, 5, [0, 1, 3, 4], False, 2, 5, 0),  # one record of the first left: kept
    (3, 1000.0, 5, [3, 4, 0, 1], False, 2, 5, 0),  # in any order
    (3, 1000.0, 5, [0, 1, 2, 3, 4], False, 1, 2, 0),  # the current file: kept while it may still be appended to
    (3, 1000.0, 5, [0, 1, 2, 3, 4], True, 0, 0, 0),  # ... deleted by the stop once its records are taken
    (3, 1000.0, 5, [0, 1, 2, 4], True, 1, 2, 1),  # the stop leaves a file with a record not taken
    (3, 1000.0, 7, [6, 5, 4, 3], True, 1, 3, 3),  # the second and third go, the first stays
    (1000, 0.0, 2, [0, 1], False, 0, 0, 0),  # rotated by time: an idle current file is deleted
    (1000, 0.0, 3, [1], False, 2, 2, 0),
]


@pytest.mark.parametrize(("rotate_lines", "rotate_s", "appended", "taken", "closed", "files", "lines", "left"),
                         TABLE)
def test_a_journal_file_goes_once_its_records_are_taken(
        tmp_path: Path, rotate_lines: int, rotate_s: float, appended: int, taken: list[int], closed: bool,
        files: int, lines: int, left: int) -> None:
    spool = Spool(tmp_path / "rec-0123456789abcdef", 1 << 20)
    journal = Journal(spool, rotate_lines=rotate_lines, rotate_s=rotate_s)
    held: list[Segment] = [journal.append(record(n)) for n in range(appended)]
    for n in taken:
        journal.settle([held[n]])
    stopped = journal.close() if closed else 0
    names = spool.files()
    assert len(names) == files and all("-journal-" in name for name in names)
    ids: list[str] = []
    for name in names:
        records, refused = open_lines(spool.line_key(), (spool.directory / name).read_bytes(),
                                      dt.datetime.now(dt.UTC), 90)
        assert not refused
        ids += [r["id"] for r in records]
    assert len(ids) == lines and stopped == left
    assert set(ids) >= {record(n)["id"] for n in range(appended) if n not in taken}
    journal.close()


def test_a_drain_skips_a_live_journal_and_takes_a_dead_one(tmp_path: Path) -> None:
    here = tmp_path / "rec-0123456789abcdef"
    journal, drain = Journal(Spool(here, 1 << 20)), Spool(here, 1 << 20)
    journal.append(record(1))
    journal.append(record(2))
    assert drain.claim() == (None, [])  # flock'd by its (live) process
    assert journal.close() == 2  # the process gone: its lock with it
    claimed, _ = drain.claim()
    assert claimed is not None and [r["id"] for r in claimed.records] == [record(1)["id"], record(2)["id"]]
    drain.release(claimed, True)
    assert not drain.files()


@pytest.mark.parametrize("mode", ["refuse", "count"])
async def test_a_journal_that_cannot_be_written_is_the_sink_failing(tmp_path: Path, mode: str) -> None:
    config = settings(tmp_path, on_sink_failure=mode, max_delay_s=60)
    sink, counts = FlakySink(), {}
    rec = recorder(config, sink, counts)
    folder(config).write_bytes(b"")  # the journal's folder cannot be made (a full or unwritable disk alike)
    rec.start()
    try:
        kept = rec.keep(record(1))
        assert kept is (mode == "count") and rec.refusing() is (mode == "refuse")
        assert counts["dropped"] == 1  # reason journal_unwritten
        if mode == "refuse":  # the caller answers 503 and keeps that answer's record (in memory), counted again
            assert rec.keep({**record(1), "status": 503, "code": "UNAVAILABLE"})
            assert counts["dropped"] == 2
        folder(config).unlink()
        assert rec.keep(record(2)) and not rec.refusing()
        await until(lambda: len(sink.kept) == 2)  # by id: record 1 (its answer's or its refusal's), record 2
        assert sink.kept[record(1)["id"]]["status"] == (200 if mode == "count" else 503)
    finally:
        await rec.close()
    assert not Spool(folder(config), 1).files()  # the stop deletes a journal whose records were all taken
