"""4. Engine faults, the access record's side, on the real node: its index refusing writes item by item — the
day's index write-blocked (`index.blocks.write`, 403 cluster_block_exception per item), closed (400
index_closed_exception), or refusing our user (403 security_exception, from a proxy: the local node has no security
plugin). Each is an outage of the sink, not a bad record: every answer sent meanwhile has its record once the sink
recovers, or was refused (503) — answers are counted against records. Only a record refused for its own content is
dropped, counted."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from helpers import calls
from helpers.records import day_index, metric, record_ids
from helpers.setup import load_records, own_prefix

from es_provider.engine.client import Engine
from harness.proxy import EngineProxy

# Answers asked for fixed seconds while the sink is out, back within 15 s once it recovers: timed, so `make test` runs it alone, after the parallel run (-m timing), so other tests' load cannot fail it.
pytestmark = pytest.mark.timing

DOCS = [{"document_id": f"doc-{n}", "content": f"installation notes number {n}.", "tenant_id": "team-a",
         "acl": {"public": True}} for n in range(4)]
BLOCKED_FOR_S = 3.0


def section(prefix: str, tmp: Any, spool: bool, **changes: Any) -> dict[str, Any]:
    spooling = {"spool": True, "spool_dir": str(tmp / "spool")} if spool else {"spool": False}
    return {"index": prefix, "flush_interval_s": 0.1, "max_delay_s": 1.0, **spooling, **changes}


class BulkRefusingProxy(EngineProxy):
    """Forwards everything, except that while `item_error` is set every `_bulk` item is answered with it."""

    item_error: tuple[int, str] | None = None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if self.item_error is None or request.method != "POST" or not request.path.endswith("/_bulk"):
            return await super()._forward(request)
        self.requests.append(f"{request.method} {request.path_qs}")
        status, kind = self.item_error
        lines = [orjson.loads(line) for line in (await request.read()).splitlines() if line.strip()]
        items = [{"create": {**action["create"], "status": status, "error": {"type": kind, "reason": "injected"}}}
                 for action in lines[0::2]]
        return web.json_response({"took": 1, "errors": True, "items": items})


Outage = Callable[[Engine, str, bool], Awaitable[None]]


async def write_block(engine: Engine, index: str, on: bool) -> None:
    await engine.set_write_block([index], on)


async def closed(engine: Engine, index: str, on: bool) -> None:
    if on:
        await engine._client.indices.close(index=index)
    else:
        await engine._client.indices.open(index=index, wait_for_active_shards="1")


@pytest.fixture
async def drop_prefix(engine: Engine) -> AsyncIterator[str]:
    async with own_prefix(engine, "test-access-out") as name:
        yield name


async def ask_while(client: Any, seconds: float, tag: str) -> list[tuple[int, str]]:
    """(status, record id) of each answer asked for `seconds`."""
    answers: list[tuple[int, str]] = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        execution = f"{tag}-{len(answers)}-{uuid.uuid4().hex[:6]}"
        response = await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": execution}),
                                     json=calls.body(executionId=execution))
        answers.append((response.status, response.headers.get("X-Access-Record", "")))
        await asyncio.sleep(0.03)
    return answers


async def count_across(engine: Engine, client: Any, prefix: str, outage: Callable[[bool], Awaitable[None]],
                       tag: str) -> dict[str, Any]:
    """Answers during the outage and after it, and which of the answers given have their record."""
    during = await ask_while(client, BLOCKED_FOR_S, tag)
    await outage(False)
    deadline = time.monotonic() + 15  # the writer tries again within RETRY_WAIT_S; refusals end then
    after: list[tuple[int, str]] = []
    while not after or after[-1][0] != 200:
        assert time.monotonic() < deadline, "answers did not come back after the sink recovered"
        after += await ask_while(client, 0.01, f"{tag}-back")
        await asyncio.sleep(0.2)
    after += await ask_while(client, 0.5, f"{tag}-after")
    given = {rid for status, rid in during + after if status == 200}
    found = await record_ids(engine, prefix, given, 20.0, poll_s=0.3)
    metrics = await (await client.get("/metrics")).text()
    return {"answers": len(during), "given": sum(1 for s, _ in during if s == 200),
            "refused": sum(1 for s, _ in during if s == 503), "other": [s for s, _ in during if s not in (200, 503)],
            "unrecorded": sorted(given - found), "after": [s for s, _ in after], "records": len(found & given),
            "back_after": sum(1 for s, _ in after if s == 503),
            "dropped": metric(metrics, "es_provider_access_records_dropped_total"),
            "spooled": metric(metrics, "es_provider_access_records_spooled_total")}


def report(figures: Any, what: str, spool: bool, got: dict[str, Any]) -> None:
    figures("4. Engine faults",
            f"access record, {what}, {'spool on' if spool else 'spool off'}: {got['answers']} answers asked in {BLOCKED_FOR_S:.0f} s, "
            f"{got['given']} given (200), {got['refused']} refused (503) (and {got['back_after']} more until the writer's "
            f"next try saw the sink back); once it recovered {got['records']} of the "
            f"{got['given'] + got['after'].count(200)} answers given had their record, "
            f"{len(got['unrecorded'])} unrecorded, {got['dropped']:.0f} records dropped, {got['spooled']:.0f} spooled")


def check(got: dict[str, Any], spool: bool) -> None:
    assert not got["other"], got
    assert not got["unrecorded"], got  # no answer sent without its record
    assert got["dropped"] == 0, got
    assert got["after"][-1] == 200 and set(got["after"]) <= {200, 503}, got
    if spool:
        assert got["refused"] == 0 and got["spooled"] > 0, got  # the spool kept them: nothing refused
    else:
        assert got["refused"] > 0, got  # past max_delay_s the service refuses


@pytest.mark.parametrize("spool", [pytest.param(False, id="no-spool"), pytest.param(True, id="spool")])
@pytest.mark.parametrize("outage", [pytest.param(write_block, id="write-block"), pytest.param(closed, id="closed")])
async def test_a_write_blocked_or_closed_day_index_is_an_outage_not_a_bad_record(
        engine, kb, client_for, drop_prefix, tmp_path, figures, outage: Outage, spool: bool) -> None:
    await load_records(engine, kb, DOCS)
    client = await client_for(kb, access_log=section(drop_prefix, tmp_path, spool))
    first = await ask_while(client, 0.01, "first")
    assert await record_ids(engine, drop_prefix, {first[0][1]}, 20.0, poll_s=0.3) >= {first[0][1]}  # the day's index exists
    index = await day_index(engine, drop_prefix)
    await outage(engine, index, True)
    try:
        got = await count_across(engine, client, drop_prefix, lambda on: outage(engine, index, on), "out")
    finally:
        await outage(engine, index, False)
    report(figures, "the day's index " + ("write-blocked" if outage is write_block else "closed"), spool, got)
    check(got, spool)


@pytest.mark.parametrize("spool", [pytest.param(False, id="no-spool"), pytest.param(True, id="spool")])
async def test_a_sink_that_refuses_our_user_is_an_outage(engine, kb, client_for, drop_prefix, tmp_path, figures,
                                                         spool: bool) -> None:
    await load_records(engine, kb, DOCS)
    sink = await BulkRefusingProxy(engine.url).start()
    try:
        client = await client_for(kb, access_log=section(drop_prefix, tmp_path, spool, url=sink.url))
        sink.item_error = (403, "security_exception")

        async def outage(on: bool) -> None:
            sink.item_error = (403, "security_exception") if on else None

        got = await count_across(engine, client, drop_prefix, outage, "deny")
    finally:
        await sink.close()
    report(figures, "every item refused 403 security_exception (our user lost its write permission; from a proxy: the "
                    "local node has no security plugin)", spool, got)
    check(got, spool)


async def test_a_record_refused_for_its_content_is_dropped_and_counted(engine, kb, client_for, drop_prefix,
                                                                      tmp_path) -> None:
    await load_records(engine, kb, DOCS)
    sink = await BulkRefusingProxy(engine.url).start()
    try:
        client = await client_for(kb, access_log=section(drop_prefix, tmp_path, False, url=sink.url))
        sink.item_error = (400, "mapper_parsing_exception")
        answers = await ask_while(client, 1.5, "bad")
        dropped = 0.0
        for _ in range(50):  # the last batch goes out within flush_interval_s
            metrics = await (await client.get("/metrics")).text()
            dropped = metric(metrics, 'es_provider_access_records_dropped_total{reason="rejected"}')
            if dropped >= len(answers):
                break
            await asyncio.sleep(0.1)
    finally:
        await sink.close()
    assert {s for s, _ in answers} == {200}, answers  # a bad record does not take the service down
    assert dropped == len(answers)
