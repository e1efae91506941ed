"""The access record's failure rules and durable spool (audit/recorder.py, channel.py, spool.py, access.py), without an engine: which item
errors are the record's fault, JSON Lines lines that split the Python way, and a sink that is down for longer than
max_delay_s — its records go to the spool (no refusal), come back out once it takes writes, and survive the process
(the next start drains them); a full spool refuses as no spool does. What the spool refuses is in
test_access_spool_refusals.py."""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.spooling import KeepingSink

from es_provider.audit import access
from es_provider.audit.lines import Refusal, sign
from es_provider.audit.recorder import Recorder
from es_provider.audit.spool import Spool, SpoolFull, spool_folder
from es_provider.config.audit import AccessLogSettings
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.edge.exchange import Exchange

# status, the engine's error type, whether the record is dropped (its own content) or kept for another try, id
REJECTIONS = """
    400  mapper_parsing_exception          drop  mapping
    400  document_parsing_exception        drop  parsing
    400  illegal_argument_exception        drop  illegal-argument
    400  strict_dynamic_mapping_exception  drop  strict-mapping
    403  cluster_block_exception           keep  write-block
    400  index_closed_exception            keep  closed
    403  security_exception                keep  permission
    401  security_exception                keep  authentication
    404  index_not_found_exception         keep  no-index
    429  es_rejected_execution_exception   keep  busy
    503  unavailable_shards_exception      keep  no-primary
    403  mapper_parsing_exception          keep  content-type-under-another-status
    400  something_new_exception           keep  unknown-is-an-outage
"""


@pytest.mark.parametrize(("status", "kind", "dropped"), [
    pytest.param(int(status), kind, outcome == "drop", id=name)
    for status, kind, outcome, name in map(str.split, REJECTIONS.strip().splitlines())
])
def test_only_a_record_s_own_content_drops_it(status: int, kind: str, dropped: bool) -> None:
    assert access.rejected_for_content(status, kind) is dropped


@pytest.mark.parametrize("text", [
    pytest.param("a\u2028b", id="line-separator"), pytest.param("a\u2029b", id="paragraph-separator"),
    pytest.param("a\u0085b", id="next-line"), pytest.param("a\nb\rc\x1c\x1d\x1e\x0b\x0c", id="ascii-breaks"),
    pytest.param("\u2028\u2028\u0085é漢", id="mixed"),
])
def test_a_json_line_is_one_line_the_python_way(text: str) -> None:
    line = access.json_line({"id": "r", "subject": text})
    assert line.endswith(b"\n") and len(line.decode().splitlines()) == 1
    assert orjson.loads(line) == {"id": "r", "subject": text}


def settings(tmp_path: Path, **changes: Any) -> AccessLogSettings:
    return AccessLogSettings(**{"index": "rec", "flush_interval_s": 0.05, "max_delay_s": 0.4,
                                "spool_dir": str(tmp_path), **changes})


NODES = ["http://flaky:9200"]  # the records' cluster of these tests


def rid(n: int) -> str:
    return f"{n:026x}"


def record(n: int) -> dict[str, Any]:
    """An access record as the service makes one (the spool drains nothing else)."""
    entry = Exchange("sparktide", "/agent/knowledge/{knowledge_id}/{version}", "POST", "127.0.0.1", id=rid(n),
                     subject="u-alice", knowledge=[("kb", "1.0.0")])
    return access.record(entry, status=200, code="OK", moment=access.now_iso(), duration_ms=1.0, worker=1)


def folder(config: AccessLogSettings) -> Path:
    return spool_folder(config, NODES)


class FlakySink(KeepingSink):
    """Takes nothing while `down` (raises, as an engine outage does); keeps what it took by id."""

    def __init__(self) -> None:
        super().__init__(NODES)
        self.down = False
        self.hang = False

    async def write(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        if self.hang:  # until it times out (the engine's timeout_s), which the test brings forward
            while self.hang:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            raise KnowledgeError(ErrorCode.TIMED_OUT, detail="timed out")
        if self.down:
            raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="3 records refused for now (403 cluster_block_exception)")
        return await super().write(batch)


def recorder(config: AccessLogSettings, sink: FlakySink, counts: dict[str, int]) -> Recorder:
    def count(name: str) -> Any:
        return lambda _label, n: counts.__setitem__(name, counts.get(name, 0) + n)

    return Recorder(config, [sink], dropped=count("dropped"), written=count("written"), spooled=count("spooled"),
                    drained=count("drained"))


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


async def until(check: Any, seconds: float = 5.0) -> None:
    stop = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < stop
        await asyncio.sleep(0.02)


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


async def test_the_file_sink_writes_one_line_per_record_the_python_way(tmp_path: Path) -> None:
    from es_provider.audit.sinks import FileSink

    sink = FileSink(tmp_path)
    await sink.prepare()
    records = [{**record(n), "subject": f"u{n}\u2028x\u0085y\u2029z"} for n in range(3)]
    await sink.write(records)
    (written,) = tmp_path.glob("access-*.jsonl")  # noqa: ASYNC240
    lines = written.read_text(encoding="utf-8").splitlines()
    assert [orjson.loads(line) for line in lines] == records
