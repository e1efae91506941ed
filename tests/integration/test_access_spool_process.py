"""The access record's spool in the real `es-provider serve` process (issue 52, findings 4 and 5): a FIFO in the spool
folder does not stall the drain, and SIGTERM stops the process (it once waited for ever for the thread blocked
opening it); a process killed (SIGKILL) while spooling, restarted: every record it had spooled reaches the index
once — its key survived the restart — and the line the kill cut short is counted."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from helpers import calls
from helpers.records import metric, record_ids
from helpers.served import Served, kb_entry, write_config
from helpers.setup import TEST_ENV, load_records, own_prefix
from helpers.spooling import FIRST, RecordsFront, entries, unblock, written_ids

from es_provider.engine.client import Engine

MAX_DELAY_S = 0.6
DOCS = [{"document_id": f"doc-{n}", "content": f"installation notes number {n}.", "tenant_id": "team-a",
         "acl": {"public": True}} for n in range(3)]


@pytest.fixture
async def prefix(engine: Engine) -> AsyncIterator[str]:
    async with own_prefix(engine, "test-access-proc") as name:
        yield name


@pytest.fixture
async def front(engine: Engine) -> AsyncIterator[RecordsFront]:
    proxy = await RecordsFront(engine.url).start()
    yield proxy
    await proxy.close()


def config_of(tmp_path: Path, node: str, alias: str, kb_id: str, prefix: str, url: str) -> Path:
    return write_config(tmp_path / "config.toml", node, [kb_entry(alias, id=kb_id)], principals={"u-alice": ["eng"]},
                        sections={"access_log": {"index": prefix, "url": url, "flush_interval_s": 0.1,
                                                 "max_delay_s": MAX_DELAY_S, "spool_dir": str(tmp_path / "spool")}})


async def serve(config: Path, log: Path) -> Served:
    """Started in a thread: Served waits for /healthz with blocking sleeps, and the front answers on this loop."""
    return await asyncio.to_thread(Served, config, TEST_ENV, log)


async def ask(session: aiohttp.ClientSession, served: Served, given: list[tuple[float, str]]) -> int:
    execution = f"p-{uuid.uuid4().hex[:10]}"
    async with session.post(served.base + calls.ROUTE, json=calls.body(executionId=execution),
                            headers=calls.headers(**{"Idempotency-Key": execution})) as response:
        if response.status == 200:
            given.append((time.monotonic(), response.headers["X-Access-Record"]))
        return response.status


async def until_spooled(session: aiohttp.ClientSession, served: Served, spool_dir: Path,
                        given: list[tuple[float, str]]) -> Path:
    deadline = time.monotonic() + 15
    while not (found := entries(spool_dir, "*/spool-*.jsonl")):
        assert time.monotonic() < deadline, served.logs()[-3000:]
        assert await ask(session, served, given) == 200
        await asyncio.sleep(0.05)
    return found[0].parent


def spooled_ids(folder: Path) -> list[str]:
    """The record ids of the whole lines in the spool's files (each line: a MAC, a space, the record)."""
    ids = []
    for path in entries(folder, "spool-*.jsonl"):
        *whole, _ = path.read_bytes().split(b"\n")
        ids += [orjson.loads(line.split(b" ", 1)[1])["id"] for line in whole if line]
    return ids


async def test_a_fifo_in_the_spool_neither_stalls_the_drain_nor_the_sigterm(
        opensearch, engine, kb, prefix, front, tmp_path, figures) -> None:
    await load_records(engine, kb, DOCS)
    front.down = True
    served = await serve(config_of(tmp_path, opensearch.url, kb.alias, kb.id, prefix, front.url),
                         tmp_path / "service.log")
    folder: Path | None = None
    try:
        given: list[tuple[float, str]] = []
        async with aiohttp.ClientSession() as session:
            folder = await until_spooled(session, served, tmp_path / "spool", given)
            os.mkfifo(folder / f"{FIRST}.jsonl")  # sorts first: the next drain's first claim
            front.down = False
            for _ in range(10):
                assert await ask(session, served, given) == 200
                await asyncio.sleep(0.05)
            ids = {rid for _, rid in given}
            missing = ids - await record_ids(engine, prefix, ids, 20.0, poll_s=0.3)
            text = await (await session.get(served.base + "/metrics")).text()
        started = time.monotonic()  # asked whatever became of the records: the stop is the other half
        code = await asyncio.to_thread(served.stop, signal.SIGTERM, 30)
        stopped_s = time.monotonic() - started
    except subprocess.TimeoutExpired:
        pytest.fail("SIGTERM did not stop the process within 30 s")
    finally:
        unblock(folder)
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait()
    assert not missing, f"{len(missing)} of {len(ids)} answers given have no record"
    assert metric(text, 'es_provider_access_records_dropped_total{reason="spool_bad_file"}') == 1
    assert code == 0 and "is a FIFO: not read" in served.logs()
    figures("4. Engine faults", f"access record's spool, a FIFO planted in its folder: set aside unread, all "
                                f"{len(ids)} answers' records in the index, SIGTERM stopped the process in "
                                f"{stopped_s:.1f} s")


async def test_a_process_killed_while_spooling_has_its_records_drained_by_the_next(
        opensearch, engine, kb, prefix, front, tmp_path, figures) -> None:
    await load_records(engine, kb, DOCS)
    config = config_of(tmp_path, opensearch.url, kb.alias, kb.id, prefix, front.url)
    front.down = True
    first = await serve(config, tmp_path / "first.log")
    given: list[tuple[float, str]] = []
    try:
        async with aiohttp.ClientSession() as session:
            folder = await until_spooled(session, first, tmp_path / "spool", given)

            async def answer_for(seconds: float) -> None:
                stop = time.monotonic() + seconds
                while time.monotonic() < stop:
                    await ask(session, first, given)

            await asyncio.gather(*(answer_for(2.0) for _ in range(4)))  # the spooler appends every 0.15 s
            first.process.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            first.process.wait()
    finally:
        with contextlib.suppress(Exception):
            first.stop(signal.SIGKILL)
    # A kill inside write(2) leaves a line cut short; a kill between two writes does not: make it so, as a kill
    # inside the spooler's append would (the record it spooled is still in the journal, which is deleted only once
    # the append returned).
    newest = [p for p in entries(folder, "spool-*.jsonl") if "-journal-" not in p.name][-1]
    whole = newest.read_bytes()
    last = whole[:-1].rfind(b"\n") + 1
    newest.write_bytes(whole + whole[last:last + 80])
    spooled = spooled_ids(folder)
    assert spooled

    front.down = False
    second = await serve(config, tmp_path / "second.log")
    try:
        async with aiohttp.ClientSession() as session:
            after: list[tuple[float, str]] = []
            for _ in range(5):
                assert await ask(session, second, after) == 200
            wanted = set(spooled) | {rid for _, rid in after}
            found = await record_ids(engine, prefix, wanted, 20.0, poll_s=0.3)
            assert wanted <= found, f"{len(wanted - found)} of {len(wanted)} spooled records are not in the index"
            text = await (await session.get(second.base + "/metrics")).text()
            torn = metric(text, 'es_provider_access_records_dropped_total{reason="spool_torn"}')
            refused = metric(text, "es_provider_access_records_dropped_total") - torn
        # Every answer given before the kill has its record in the index, once: what was spooled, and what was
        # queued in memory only (the journal, written before the answer went out, holds it).
        answered = {rid for _, rid in given}
        found = await record_ids(engine, prefix, answered, 20.0, poll_s=0.3)
        ids = await written_ids(engine, prefix)
        lost = answered - found
        young = max((killed_at - moment for moment, rid in given if rid in lost), default=0.0)
        assert not lost, f"{len(lost)} of {len(given)} answers given before the kill have no record (answered at " \
                         f"most {young:.2f} s before it; {len(spooled)} were spooled)"
        assert len(ids) == len(set(ids))  # once each
        assert torn == 1 and refused == 0, second.logs()[-3000:]
    finally:
        second.stop()
    figures("4. Engine faults", f"access record's spool and journal, a process SIGKILLed while spooling and "
                                f"restarted: {len(given)} answers given before the kill, {len(spooled)} lines in the "
                                f"spool and journal files (a line cut short: counted spool_torn), all {len(given)} "
                                f"answers' records in the index once after the restart")
