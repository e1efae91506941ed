"""A sink's writer (audit/channel.py), without an engine: it outlives any record (a signed record of the wrong type,
one its sink cannot take: counted, set aside, logged without content), says when its spool is stuck or it ended (a
readiness reason), and stops in bounded time even then."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.recording import rec, settings, signed, until
from helpers.spooling import KeepingSink

from es_provider.audit import channel, spool
from es_provider.audit.recorder import Recorder
from es_provider.audit.spool import Spool
from es_provider.config.audit import AccessLogSettings


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



def plant(config: AccessLogSettings, sink: Sink, data: bytes, name: str = "spool-00000000000000000001-1-aa") -> Spool:
    store = Spool(spool.spool_folder(config, sink.nodes()), 1 << 20)
    store.append([rec(100, dt.datetime.now(dt.UTC))])  # makes the folder and the key
    store.seal()
    (store.directory / f"{name}.jsonl").write_bytes(data)
    return store



async def test_the_writer_outlives_a_signed_record_of_the_wrong_type(tmp_path: Path) -> None:
    """What the service itself spooled wrong (a bug) is refused like a planted line, and the writer goes on."""
    config, sink, counts = settings(tmp_path / "spool"), Sink(), {}
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
    config, sink, counts = settings(tmp_path / "spool"), Sink(), {}
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
    config, sink, counts = settings(tmp_path / "spool"), Sink(), {}
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
    config, sink = settings(tmp_path / "spool"), Sink()
    rec_ = recorder(config, sink, {})
    rec_.start()
    try:
        assert rec_.stuck() is None
        rec_._tasks[0].cancel()
        await until(lambda: rec_.stuck() == "a writer of the access record stopped")
    finally:
        await rec_.close()
    assert rec_.stuck() is None  # the stop's own cancel is not a reason
