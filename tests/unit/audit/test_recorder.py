"""The Recorder (audit/recorder.py), without an engine: a sink that is down for longer than max_delay_s — its records
go to the spool (no refusal), come back out once it takes writes, and survive the process (the next start drains
them); a full spool refuses as no spool does."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from helpers.recording import FlakySink, folder, record, recorder, settings, until

from es_provider.audit.recorder import Recorder
from es_provider.audit.spool import Spool


async def answer_for(rec: Recorder, seconds: float, first: int = 0) -> tuple[int, int]:
    """Keeps a record every 10 ms as answers do; (records kept, answers refused)."""
    n, refused = first, 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        if rec.refusing():
            refused += 1
        else:
            rec.keep(record(n))
            n += 1
        await asyncio.sleep(0.01)
    return n - first, refused



# Spooled within max_delay_s (0.4 s here) of a hanging sink: a fresh clone's phase 1 (4 processes on 2 cores) once
# kept the writer from spooling in time and 8 answers were refused (fc4, 12-05); -m timing runs it in one process.
@pytest.mark.timing
@pytest.mark.parametrize("hang", [pytest.param(False, id="failing"), pytest.param(True, id="hanging")])
async def test_a_sink_down_past_max_delay_spools_instead_of_refusing(tmp_path: Path, hang: bool) -> None:
    config = settings(tmp_path)
    sink, counts = FlakySink(), {}
    rec = recorder(config, sink, counts)
    rec.start()
    try:
        sink.down, sink.hang = True, hang
        kept, refused = await answer_for(rec, 5 * config.max_delay_s)
        assert refused == 0 and counts["spooled"] >= kept // 2 and Spool(folder(config), 1 << 20).files()
        sink.down = sink.hang = False
        more, refused = await answer_for(rec, 0.5, first=kept)
        await until(lambda: len(sink.kept) == kept + more and not Spool(folder(config), 1).files())
    finally:
        await rec.close()
    assert refused == 0 and counts.get("dropped", 0) == 0
    assert counts["drained"] + counts.get("written", 0) >= kept + more  # a record spooled while in flight: written twice



async def test_a_full_spool_refuses_and_recovers(tmp_path: Path) -> None:
    config = settings(tmp_path, spool_max_bytes=2048)
    sink, counts = FlakySink(), {}
    rec = recorder(config, sink, counts)
    rec.start()
    try:
        sink.down = True
        kept, refused = await answer_for(rec, 6 * config.max_delay_s)
        assert refused > 0 and Spool(folder(config), 1).size() <= 2048
        sink.down = False
        await until(lambda: not rec.refusing() and len(sink.kept) == kept and not Spool(folder(config), 1).files())
    finally:
        await rec.close()
    assert counts.get("dropped", 0) == 0



async def test_what_the_stop_cannot_write_is_drained_by_the_next_start(tmp_path: Path) -> None:
    config = settings(tmp_path, max_delay_s=60, flush_interval_s=1)
    sink, counts = FlakySink(), {}
    sink.down = True
    first = recorder(config, sink, counts)
    first.start()
    for n in range(30):
        first.keep(record(n))
    await first.close(wait_s=0.5)
    assert counts.get("dropped", 0) == 0 and not sink.kept and len(Spool(folder(config), 1).files()) == 1

    sink.down = False
    second = recorder(config, sink, counts)
    second.start()
    try:
        # Kept, and the drained file deleted (a stop between the two leaves the file for the next drain: 409s).
        await until(lambda: len(sink.kept) == 30 and not Spool(folder(config), 1).files())
    finally:
        await second.close()
    assert counts["drained"] == 30 and not Spool(folder(config), 1).files()
