"""The access record's unit tests (tests/unit/audit/): records as the service makes them, signed spool lines, the
settings and recorder of a test without an engine, and a sink that can be down (FlakySink)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from es_provider.audit import access, lines
from es_provider.audit.recorder import Recorder
from es_provider.audit.spool import spool_folder
from es_provider.config.audit import AccessLogSettings
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.edge.exchange import Answer, Exchange
from helpers.spooling import KeepingSink

NODES = ["http://flaky:9200"]  # the records' cluster of these tests
NOW = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)
KEY = lines.line_key(b"k" * 32, "rec-0123456789abcdef")


def settings(tmp_path: Path, **changes: Any) -> AccessLogSettings:
    return AccessLogSettings(**{"index": "rec", "flush_interval_s": 0.05, "max_delay_s": 0.4,
                                "spool_dir": str(tmp_path), **changes})


def rid(n: int) -> str:
    return f"{n:026x}"


def record(n: int) -> dict[str, Any]:
    """An access record as the service makes one (the spool drains nothing else)."""
    entry = Exchange("sparktide", "/agent/knowledge/{knowledge_id}/{version}", "POST", "127.0.0.1", id=rid(n),
                     subject="u-alice", knowledge=[("kb", "1.0.0")])
    return access.record(entry, status=200, code="OK", moment=access.now_iso(), duration_ms=1.0, worker=1)


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


async def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    stop = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < stop
        await asyncio.sleep(0.02)
