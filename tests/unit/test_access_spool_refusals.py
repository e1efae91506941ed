"""What the access record's spool refuses (issue 52, findings 4 and 5), without an engine: each kind of line
(lines.open_line: unsigned, a MAC of another key or folder, altered, not JSON, of the wrong shape or type, out of the
time window), each kind of entry (symlink, FIFO, socket, device, folder, too large: set aside unread), a folder that
is a symlink, the host's key file (made once, 0600, shared by workers and restarts; refused when loose), and the
writer, which outlives any record, says when its spool is stuck, and stops in bounded time even then."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.spooling import KeepingSink

from es_provider.audit import access, channel, lines, spool, spool_key
from es_provider.audit.lines import Refusal
from es_provider.audit.recorder import Recorder
from es_provider.audit.sinks import IndexSink, _storable
from es_provider.audit.spool import Spool
from es_provider.audit.spool_key import SpoolKeyError
from es_provider.config.audit import AccessLogSettings
from es_provider.edge.exchange import Answer, Exchange

NOW = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)
KEY = lines.line_key(b"k" * 32, "rec-0123456789abcdef")


def at(moment: dt.datetime) -> str:
    return access.iso_time(moment)


def rec(n: int = 1, moment: dt.datetime = NOW, **changes: Any) -> dict[str, Any]:
    """An access record as access.record makes one, with every optional field."""
    entry = Exchange("sparktide", "/agent/knowledge/{knowledge_id}/{version}", "POST", "10.0.0.1",
                         id=f"{n:026x}", credential="callback:kb", app_id="app-1", tenants=("team-a",),
                         subject="u-alice", acting_subject=None, knowledge=[("kb", "1.0.0"), ("kb2", None)],
                         request_ids={"runId": "r", "traceId": "t", "executionId": "e"}, query="q",
                     answer=Answer(b"", (("kb", "doc-1", "c1", 1.5), ("kb", "doc-1", "c2", None))))
    made = access.record(entry, status=200, code="OK", moment=at(moment), duration_ms=3.25, worker=7,
                         span={"trace_id": "0" * 32, "span_id": "1" * 16}, query_key=b"k" * 32)
    return {**made, **changes}


def signed_body(body: bytes, key: bytes = KEY) -> bytes:
    return lines._mac(key, body) + b" " + body


def signed(record: Any, key: bytes = KEY) -> bytes:
    return signed_body(orjson.dumps(record), key)


def without(name: str) -> dict[str, Any]:
    record = rec()
    del record[name]
    return record


# name, the line (without its newline), what a drain makes of it (a Refusal, or None: the record itself)
LINES: list[tuple[str, Callable[[], bytes], Refusal | None]] = [
    ("genuine", lambda: lines.sign(KEY, rec())[:-1], None),
    ("genuine-bare", lambda: signed({k: v for k, v in rec().items() if k not in (
        "run_id", "trace_id", "execution_id", "query_hmac", "otel_trace_id", "otel_span_id")}), None),
    ("unsigned", lambda: orjson.dumps(rec()), Refusal.FORGED),
    ("random-mac", lambda: os.urandom(32).hex().encode() + b" " + orjson.dumps(rec()), Refusal.FORGED),
    ("upper-case-mac", lambda: signed(rec()).upper()[:64] + signed(rec())[64:], Refusal.FORGED),
    ("no-space", lambda: signed(rec()).replace(b" ", b"", 1), Refusal.FORGED),
    ("another-folder", lambda: signed(rec(), lines.line_key(b"k" * 32, "rec-fedcba9876543210")), Refusal.FORGED),
    ("another-host-key", lambda: signed(rec(), lines.line_key(b"j" * 32, "rec-0123456789abcdef")), Refusal.FORGED),
    ("altered-after-signing", lambda: signed(rec()).replace(b"u-alice", b"u-mallo"), Refusal.FORGED),
    ("mac-only", lambda: signed(rec())[:64], Refusal.FORGED),
    ("empty-mac-of-nothing", lambda: signed_body(b""), Refusal.INVALID),
    ("not-json", lambda: signed_body(b"{not json"), Refusal.INVALID),
    ("json-array", lambda: signed([rec()]), Refusal.INVALID),
    ("id-and-time-5", lambda: signed({"id": "fa" * 13, "time": 5}), Refusal.INVALID),
    ("time-5", lambda: signed(rec(time=5)), Refusal.INVALID),
    ("time-not-iso", lambda: signed(rec(time="yesterday")), Refusal.INVALID),
    ("id-a-path", lambda: signed(rec(id="../../etc/passwd")), Refusal.INVALID),
    ("id-number", lambda: signed(rec(id=12345678)), Refusal.INVALID),
    ("status-text", lambda: signed(rec(status="200")), Refusal.INVALID),
    ("status-out-of-range", lambda: signed(rec(status=999)), Refusal.INVALID),
    ("subject-number", lambda: signed(rec(subject=5)), Refusal.INVALID),
    ("documents-a-string", lambda: signed(rec(documents="doc-1")), Refusal.INVALID),
    ("served-wrong-shape", lambda: signed(rec(served=[{"document_id": "d"}])), Refusal.INVALID),
    ("no-subject-key", lambda: signed(without("subject")), Refusal.INVALID),
    ("an-extra-key", lambda: signed(rec(content="the document's text")), Refusal.INVALID),
    ("huge-field", lambda: signed(rec(subject="x" * 10_000)), Refusal.INVALID),
    ("year-2019", lambda: signed(rec(moment=dt.datetime(2019, 3, 4, tzinfo=dt.UTC))), Refusal.OUT_OF_WINDOW),
    ("year-2099", lambda: signed(rec(moment=dt.datetime(2099, 1, 1, tzinfo=dt.UTC))), Refusal.OUT_OF_WINDOW),
    ("four-minutes-ahead", lambda: signed(rec(moment=NOW + dt.timedelta(minutes=4))), None),
    ("six-minutes-ahead", lambda: signed(rec(moment=NOW + dt.timedelta(minutes=6))), Refusal.OUT_OF_WINDOW),
    ("oldest-kept-day", lambda: signed(rec(moment=dt.datetime(2026, 9, 6, tzinfo=dt.UTC))), None),
    ("a-day-past-retention", lambda: signed(rec(moment=dt.datetime(2026, 9, 5, 23, 59, tzinfo=dt.UTC))),
     Refusal.OUT_OF_WINDOW),
]


@pytest.mark.parametrize(("make", "expected"), [pytest.param(make, expected, id=name) for name, make, expected in LINES])
def test_each_kind_of_line(make: Callable[[], bytes], expected: Refusal | None) -> None:
    line = make()
    opened = lines.open_line(KEY, line, NOW, retention_days=90)
    if expected is None:
        assert opened == orjson.loads(line[65:])
    else:
        assert opened is expected


def test_the_retention_window_is_the_sweep_s() -> None:
    """The oldest day a drain writes is the oldest day the retention sweep keeps."""
    oldest = dt.date(2026, 9, 6)
    assert access.expired_indices(["p-2026.09.06", "p-2026.09.05"], "p", NOW.date(), 90) == ["p-2026.09.05"]
    assert lines.in_window(at(dt.datetime.combine(oldest, dt.time(), dt.UTC)), NOW, 90)
    assert not lines.in_window(at(dt.datetime.combine(oldest, dt.time(), dt.UTC) - dt.timedelta(seconds=1)), NOW, 90)


def test_a_file_s_lines_counted_by_reason() -> None:
    data = b"".join([lines.sign(KEY, rec(1)), b"\n", orjson.dumps(rec(2)) + b"\n", lines.sign(KEY, rec(3)),
                     signed(rec(4, time=5)) + b"\n", signed(rec(5, moment=dt.datetime(2099, 1, 1, tzinfo=dt.UTC)))
                     + b"\n", lines.sign(KEY, rec(6))[:-30]])
    records, refused = lines.open_lines(KEY, data, NOW, 90)
    assert [r["id"] for r in records] == [rec(1)["id"], rec(3)["id"]]
    assert refused == {Refusal.FORGED: 1, Refusal.INVALID: 1, Refusal.OUT_OF_WINDOW: 1, Refusal.TORN: 1}


def test_every_record_the_service_makes_has_the_spooled_shape() -> None:
    """A field added to access.record must be added to SpooledRecord, or the drain would refuse every record."""
    bare = access.record(Exchange("dify", "/retrieval", "POST", "::1"), status=401, code="UNAUTHORIZED",
                         moment=access.now_iso(), duration_ms=0.1, worker=1)
    for made in (rec(), bare):
        at = dt.datetime.fromisoformat(made["time"].replace("Z", "+00:00"))  # judged at its own time: any day
        assert lines.open_line(KEY, lines.sign(KEY, made)[:-1], at, 1) == made


def test_the_cluster_identity() -> None:
    one = lines.cluster_identity(["http://a:9200", "http://b:9200"], "rec")
    assert one == lines.cluster_identity(["http://b:9200", "http://a:9200"], "rec")  # any order
    assert one != lines.cluster_identity(["http://a:9200"], "rec")
    assert one != lines.cluster_identity(["http://a:9200", "http://b:9200"], "rec2")
    assert one != lines.cluster_identity(["https://a:9200", "http://b:9200"], "rec")
    assert len(one) == 16 and int(one, 16) >= 0


def test_the_index_sink_names_its_cluster_as_the_client_normalized_it() -> None:
    from es_provider.engine.connection import Connection

    class Named:
        def __init__(self, url: str) -> None:
            self.connection = Connection.plain(url)

    nodes = IndexSink(Named("http://Node-A:9200/, node-b"), "rec").nodes()  # type: ignore[arg-type]
    assert nodes == ["http://node-a:9200", "http://node-b:80"]
    assert IndexSink(Named("node-b:80,http://node-a:9200"), "rec").nodes() == sorted(nodes, reverse=True)  # type: ignore[arg-type]


def test_a_record_of_the_wrong_type_is_rejected_by_the_sink_not_its_writer() -> None:
    good = rec()
    batch = [good, {"id": "x", "time": 5}, {"id": 5, "time": good["time"]}, {"time": good["time"]}, {}]
    storable, unstorable = _storable(batch)
    assert storable == [(0, good)] and [p for p, _ in unstorable] == [1, 2, 3, 4]


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


# --- the key ---

def test_the_key_is_made_once_private_and_shared_by_workers_and_restarts(tmp_path: Path) -> None:
    base = tmp_path / "spool"
    base.mkdir()
    with ThreadPoolExecutor(8) as pool:  # workers starting at once: one key
        keys = set(pool.map(lambda _: spool_key.load_key(base), range(16)))
    assert len(keys) == 1
    info = (base / spool_key.KEY_NAME).stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_size == spool_key.KEY_BYTES
    assert sorted(os.listdir(base)) == [spool_key.KEY_NAME]  # no temporary left

    first = Spool(base / "rec-0123456789abcdef", 1 << 20)
    first.append([rec(1, dt.datetime.now(dt.UTC))])
    first.seal()
    restarted = Spool(base / "rec-0123456789abcdef", 1 << 20)  # the next start: the key read again
    claimed, _ = restarted.claim()
    assert claimed is not None and len(claimed.records) == 1 and not claimed.refused
    restarted.release(claimed, True)


KEYS: list[tuple[str, Callable[[Path], None], str]] = [
    ("readable-by-others", lambda p: (p.write_bytes(b"k" * 32), p.chmod(0o644)), "mode 644"),
    ("short", lambda p: (p.write_bytes(b"k" * 31), p.chmod(0o600)), "not 32 bytes"),
    ("symlink", lambda p: (p.with_name("real").write_bytes(b"k" * 32), p.symlink_to(p.with_name("real"))),
     "symbolic link"),
    ("fifo", lambda p: os.mkfifo(p, 0o600), "a FIFO"),
]


@pytest.mark.parametrize(("make", "why"), [pytest.param(make, why, id=name) for name, make, why in KEYS])
def test_a_key_file_that_is_not_private_is_refused(tmp_path: Path, make: Callable[[Path], None], why: str) -> None:
    make(tmp_path / spool_key.KEY_NAME)
    with pytest.raises(SpoolKeyError, match=why) as refused:
        spool_key.load_key(tmp_path)
    assert "kkkk" not in str(refused.value)


def test_lines_of_a_lost_key_are_refused_not_drained(tmp_path: Path) -> None:
    store = folder_of(tmp_path)
    (store.directory.parent / spool_key.KEY_NAME).unlink()  # a new key is made: what the old one signed is not ours
    claimed, _ = Spool(store.directory, 1 << 20).claim()
    assert claimed is not None and claimed.records == [] and claimed.refused == {Refusal.FORGED: 1}


# --- the writer ---

def settings(tmp_path: Path, **changes: Any) -> AccessLogSettings:
    return AccessLogSettings(**{"index": "rec", "flush_interval_s": 0.05, "max_delay_s": 0.4,
                                "spool_dir": str(tmp_path / "spool"), **changes})


class Sink(KeepingSink):
    """An index sink that keeps what it is given; one record id makes it raise what nobody foresaw."""

    poison = ""

    def __init__(self) -> None:
        super().__init__(["http://sink:9200"])

    async def write(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        if any(r["id"] == self.poison for r in batch):
            raise TypeError("'int' object is not subscriptable")
        return await super().write(batch)


def recorder(config: AccessLogSettings, sink: Sink, counts: dict[str, int]) -> Recorder:
    def count(label: str, n: int) -> None:
        counts[label] = counts.get(label, 0) + n

    return Recorder(config, [sink], dropped=count, written=lambda _s, n: count("written", n),
                    drained=lambda _s, n: count("drained", n), spooled=lambda _s, n: count("spooled", n))


async def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    stop = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < stop
        await asyncio.sleep(0.02)


def plant(config: AccessLogSettings, sink: Sink, data: bytes, name: str = "spool-00000000000000000001-1-aa") -> Spool:
    store = Spool(spool.spool_folder(config, sink.nodes()), 1 << 20)
    store.append([rec(100, dt.datetime.now(dt.UTC))])  # makes the folder and the key
    store.seal()
    (store.directory / f"{name}.jsonl").write_bytes(data)
    return store


async def test_the_writer_outlives_a_signed_record_of_the_wrong_type(tmp_path: Path) -> None:
    """What the service itself spooled wrong (a bug) is refused like a planted line, and the writer goes on."""
    config, sink, counts = settings(tmp_path), Sink(), {}
    store = Spool(spool.spool_folder(config, sink.nodes()), 1 << 20)
    store.append([rec(100, dt.datetime.now(dt.UTC))])
    store.seal()
    bad = signed({"id": "fa" * 13, "time": 5}, store.line_key()) + b"\n"
    (store.directory / "spool-00000000000000000001-1-aa.jsonl").write_bytes(bad)
    rec_ = recorder(config, sink, counts)
    rec_.start()
    try:
        rec_.keep(rec(1, dt.datetime.now(dt.UTC)))
        await until(lambda: {rec(1)["id"], rec(100)["id"]} <= set(sink.kept))
        assert counts.get("spool_invalid") == 1 and rec_.stuck() is None
    finally:
        await rec_.close()


async def test_the_writer_outlives_a_record_its_sink_cannot_take(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                                 ) -> None:
    """A sink raising what nobody foresaw for one spooled record: its file is set aside, the writer goes on."""
    config, sink, counts = settings(tmp_path), Sink(), {}
    sink.poison = rec(100)["id"]
    store = plant(config, sink, b"")
    rec_ = recorder(config, sink, counts)
    rec_.start()
    try:
        rec_.keep(rec(1, dt.datetime.now(dt.UTC)))
        await until(lambda: rec(1)["id"] in sink.kept and counts.get("spool_invalid") == 1)
        await until(lambda: store.files() == [])
        rec_.keep(rec(2, dt.datetime.now(dt.UTC)))
        await until(lambda: rec(2)["id"] in sink.kept)
    finally:
        await rec_.close()
    assert any(n.startswith("rejected-") for n in os.listdir(store.directory))
    assert "TypeError at " in caplog.text and "subscriptable" not in caplog.text and "u-alice" not in caplog.text


async def test_a_stuck_drain_is_a_readiness_reason_and_the_stop_is_bounded(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    config, sink, counts = settings(tmp_path), Sink(), {}
    plant(config, sink, b"")
    release = threading.Event()
    real_claim = Spool.claim
    threads: list[threading.Thread] = []

    def hanging_claim(self: Spool) -> Any:  # a file system that hangs (an NFS server gone)
        threads.append(threading.current_thread())
        release.wait(30)
        return real_claim(self)

    monkeypatch.setattr(Spool, "claim", hanging_claim)
    monkeypatch.setattr(channel, "STUCK_AFTER_S", 0.3)
    rec_ = recorder(config, sink, counts)
    rec_.start()
    try:
        assert rec_.stuck() is None
        await until(lambda: rec_.stuck() is not None)
        assert (rec_.stuck() or "").startswith("the index sink: a spool claim has run for ")
        rec_.keep(rec(1, dt.datetime.now(dt.UTC)))  # the writer is held up: the spooler keeps it, no refusal
        await until(lambda: counts.get("spooled") == 1)
        assert not rec_.refusing()
        started = time.monotonic()
        await rec_.close(wait_s=1.0)
        assert time.monotonic() - started < 3.0
        assert threads and all(t.daemon for t in threads)  # the exit never waits for them
    finally:
        release.set()


async def test_a_writer_that_ended_is_a_readiness_reason(tmp_path: Path) -> None:
    config, sink = settings(tmp_path), Sink()
    rec_ = recorder(config, sink, {})
    rec_.start()
    try:
        assert rec_.stuck() is None
        rec_._tasks[0].cancel()
        await until(lambda: rec_.stuck() == "a writer of the access record stopped")
    finally:
        await rec_.close()
    assert rec_.stuck() is None  # the stop's own cancel is not a reason
