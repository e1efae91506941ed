"""The index sink's durable spool (audit/spool.py), without an engine: a drain claims only files no process holds,
a line a crash cut short is skipped and counted, a full spool takes nothing, the folder per prefix and cluster; what
it refuses (issue 52, findings 4 and 5): each kind of entry (symlink, FIFO, socket, device, folder, too large: set
aside unread), a folder that is a symlink, the lines of a lost key."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import socket
import stat
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers.recording import NODES, rec, record, rid, settings

from es_provider.audit import lines, spool, spool_key
from es_provider.audit.lines import Refusal, sign
from es_provider.audit.spool import Spool, SpoolFull, spool_folder
from es_provider.config.audit import AccessLogSettings


def test_a_drain_claims_only_files_no_process_holds(tmp_path: Path) -> None:
    here = tmp_path / "rec-0123456789abcdef"
    mine, other = Spool(here, 1 << 20), Spool(here, 1 << 20)
    mine.append([record(1)])
    other.append([record(2), record(3)])
    assert other.claim() == (None, [])  # mine is held (locked) by its writer
    mine.seal()
    claimed, _ = other.claim()
    assert claimed is not None and [r["id"] for r in claimed.records] == [rid(1)] and not claimed.refused
    assert mine.claim() == (None, [])  # held by the other drain now; the other's own file is held by its writer
    other.release(claimed, True)
    other.seal()
    (left,) = mine.files()
    fd = os.open(here / left, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a drain in another worker holds it
    assert mine.claim() == (None, [])
    os.close(fd)
    claimed, _ = mine.claim()
    assert claimed is not None and [r["id"] for r in claimed.records] == [rid(2), rid(3)]
    mine.release(claimed, False)  # not written: kept for the next drain
    assert mine.files() == [left]



def test_a_line_a_crash_cut_short_is_skipped_and_counted(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "rec-0123456789abcdef", 1 << 20)
    spool.append([record(1), record(2)])
    spool.seal()
    (name,) = spool.files()
    with (spool.directory / name).open("ab") as file:
        file.write(sign(spool.line_key(), record(3))[:-20])
    claimed, _ = spool.claim()
    assert claimed is not None and [r["id"] for r in claimed.records] == [rid(1), rid(2)]
    assert claimed.refused == {Refusal.TORN: 1}
    spool.release(claimed, True)



def test_a_full_spool_takes_nothing(tmp_path: Path) -> None:
    spool, first = Spool(tmp_path / "rec-0123456789abcdef", 1000), record(1)
    spool.append([first])
    with pytest.raises(SpoolFull):
        spool.append([record(n) for n in range(10)])
    spool.seal()
    (name,) = spool.files()
    assert (spool.directory / name).read_bytes() == sign(spool.line_key(), first)



def test_the_spool_folder_is_per_prefix_and_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = spool_folder(settings(tmp_path, index="rec-a"), NODES)
    assert a.parent == tmp_path and a.name.startswith("rec-a-") and len(a.name) == len("rec-a-") + 16
    assert spool_folder(settings(tmp_path, index="rec-b"), NODES) != a
    assert spool_folder(settings(tmp_path, index="rec-a"), ["http://other:9200"]) != a
    monkeypatch.setenv("ES_PROVIDER_CACHE", str(tmp_path / "cache"))
    assert spool_folder(AccessLogSettings(index="rec-b"), NODES).parent == tmp_path / "cache" / "access-spool"



# --- entries in the folder ---

def folder_of(tmp_path: Path) -> Spool:
    store = Spool(tmp_path / "spool" / "rec-0123456789abcdef", 1 << 20)
    store.append([rec(1, dt.datetime.now(dt.UTC))])
    store.seal()
    return store



def make_socket(path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="s-", dir="/tmp")) / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(short))
    short.rename(path)
    short.parent.rmdir()



def make_device(path: Path) -> None:
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers



ENTRIES: list[tuple[str, Callable[[Path, Path], None], str]] = [
    ("symlink-outside", lambda p, out: p.symlink_to(out), "a symbolic link"),
    ("symlink-passwd", lambda p, out: p.symlink_to("/etc/passwd"), "a symbolic link"),
    ("symlink-dangling", lambda p, out: p.symlink_to(out.parent / "nothing"), "a symbolic link"),
    ("fifo", lambda p, out: os.mkfifo(p), "a FIFO"),
    ("socket", lambda p, out: make_socket(p), "a socket"),
    ("folder", lambda p, out: p.mkdir(), "a folder"),
    ("too-large", lambda p, out: p.write_bytes(b"\n" * (Spool.READ_BYTES + 1)), "larger than"),
]
if os.geteuid() == 0:  # mknod needs root
    ENTRIES.append(("device", lambda p, out: make_device(p), "a device"))



@pytest.mark.parametrize(("make", "why"), [pytest.param(make, why, id=name) for name, make, why in ENTRIES])
def test_an_entry_that_is_not_a_regular_file_is_set_aside_unread(tmp_path: Path, make: Callable[[Path, Path], None],
                                                                  why: str) -> None:
    store = folder_of(tmp_path)
    outside = tmp_path / "outside.jsonl"
    planted = lines.sign(store.line_key(), rec(9, dt.datetime.now(dt.UTC)))  # signed, even
    outside.write_bytes(planted)
    name = "spool-00000000000000000001-1-aa.jsonl"
    make(store.directory / name, outside)
    with ThreadPoolExecutor(1) as pool:  # a FIFO opened without O_NONBLOCK would wait here for ever
        claimed, set_aside = pool.submit(store.claim).result(timeout=10)
    assert [(e.name, e.kept_as) for e in set_aside] == [(name, f"rejected-{name}")] and why in set_aside[0].why
    assert claimed is not None and [r["id"] for r in claimed.records] == [rec(1)["id"]]  # the genuine file, next
    store.release(claimed, True)
    assert store.files() == [] and outside.read_bytes() == planted  # a link's target untouched
    assert store.claim() == (None, [])  # set aside once, never looked at again



def test_set_aside_entries_are_bounded(tmp_path: Path) -> None:
    store = folder_of(tmp_path)
    for n in range(spool.REJECTED_KEPT + 5):
        os.mkfifo(store.directory / f"spool-{n:020d}-1-aa.jsonl")
    _, set_aside = store.claim()
    assert len(set_aside) == spool.REJECTED_KEPT + 5
    assert len([n for n in os.listdir(store.directory) if n.startswith("rejected-")]) == spool.REJECTED_KEPT



def test_a_spool_folder_that_is_a_symlink_is_neither_read_nor_written(tmp_path: Path) -> None:
    elsewhere = folder_of(tmp_path / "elsewhere")
    (tmp_path / "spool").mkdir()
    link = tmp_path / "spool" / elsewhere.directory.name
    link.symlink_to(elsewhere.directory)
    store = Spool(link, 1 << 20)
    with pytest.raises(NotADirectoryError):
        store.claim()
    with pytest.raises(NotADirectoryError):
        store.append([rec()])
    assert len(elsewhere.files()) == 1



def test_lines_of_a_lost_key_are_refused_not_drained(tmp_path: Path) -> None:
    store = folder_of(tmp_path)
    (store.directory.parent / spool_key.KEY_NAME).unlink()  # a new key is made: what the old one signed is not ours
    claimed, _ = Spool(store.directory, 1 << 20).claim()
    assert claimed is not None and claimed.records == [] and claimed.refused == {Refusal.FORGED: 1}
