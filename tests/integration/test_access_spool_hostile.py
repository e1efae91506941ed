"""The access record's spool against what others put in its folder (issue 52, findings 4 and 5), on the real node:
planted records (another subject, invented documents, 2019, 2099), lines with a forged MAC, a well-formed line of
the wrong type, a line cut short, symlinks (out of the folder, to /etc/passwd), a FIFO, a socket. Each time the
sink is down long enough for the service to spool its own records, the file is planted beside them, and the sink
comes back: every answer given has its record in the index, nothing planted reaches it, and each refusal is counted
(es_provider_access_records_dropped{reason}) and logged by file name, never by content. And two services on one
host with different clusters spool to different folders: one's records never reach the other's cluster, even when
its files are copied across."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import calls
from helpers.records import metric, record_ids
from helpers.setup import load_records, own_prefix
from helpers.spooling import FIRST, RecordsFront, entries, unblock, written_ids

from es_provider.engine.client import Engine

DOCS = [{"document_id": f"doc-{n}", "content": f"installation notes number {n}.", "tenant_id": "team-a",
         "acl": {"public": True}} for n in range(3)]
MARK = "u-mallory-planted"  # the planted records' subject: never in the index, never in a log line


def planted(n: int, moment: str) -> dict[str, Any]:
    """A record as the service writes one, for someone it never served."""
    return {"time": moment, "id": f"fa{n:024x}", "protocol": "sparktide", "route": calls.ROUTE, "method": "POST",
            "status": 200, "code": "OK", "credential": "callback:project-documents", "app_id": "app-1",
            "tenants": ["team-a"], "subject": MARK, "acting_subject": None,
            "knowledge": [{"id": "project-documents", "version": "1.0.0"}], "knowledge_ids": ["project-documents"],
            "documents": ["invented-doc"], "served": [{"knowledge_id": "project-documents",
                                                       "document_id": "invented-doc", "chunk_id": "c1", "score": 9.0}],
            "remote": "127.0.0.1", "worker": 1, "duration_ms": 1.0}


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


PLANTED = [planted(1, now_text()), planted(2, "2019-03-04T05:06:07.000Z"), planted(3, "2099-01-01T00:00:00.000Z")]
PLANTED_IDS = {r["id"] for r in PLANTED}


def lines(records: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


# --- what is planted: (how, the refusal's reason in es_provider_access_records_dropped, how many are counted) ---

def plant_unsigned(folder: Path, outside: Path) -> str:
    """Records written straight into the folder, as the service writes them but without its MAC."""
    (folder / f"{FIRST}.jsonl").write_bytes(lines(PLANTED))
    return f"{FIRST}.jsonl"


def plant_forged_mac(folder: Path, outside: Path) -> str:
    """Each line with a MAC of the right form that the service did not compute."""
    (folder / f"{FIRST}.jsonl").write_bytes(b"".join(b"%s %s\n" % (os.urandom(32).hex().encode(), orjson.dumps(r))
                                                     for r in PLANTED))
    return f"{FIRST}.jsonl"


def plant_wrong_type(folder: Path, outside: Path) -> str:
    """Well-formed JSON with the record's two keys, of the wrong type: it once killed the writer for good."""
    (folder / f"{FIRST}.jsonl").write_bytes(b'{"id": "fa000000000000000000000004", "time": 5}\n')
    return f"{FIRST}.jsonl"


def plant_truncated(folder: Path, outside: Path) -> str:
    """A line a crash cut short."""
    (folder / f"{FIRST}.jsonl").write_bytes(orjson.dumps(PLANTED[0])[:60])
    return f"{FIRST}.jsonl"


def plant_symlink_outside(folder: Path, outside: Path) -> str:
    """A link to records outside the folder."""
    (outside / "elsewhere.jsonl").write_bytes(lines(PLANTED))
    (folder / f"{FIRST}.jsonl").symlink_to(outside / "elsewhere.jsonl")
    return f"{FIRST}.jsonl"


def plant_symlink_passwd(folder: Path, outside: Path) -> str:
    (folder / f"{FIRST}.jsonl").symlink_to("/etc/passwd")
    return f"{FIRST}.jsonl"


def plant_fifo(folder: Path, outside: Path) -> str:
    """A FIFO: opened for reading without O_NONBLOCK, the drain's thread waits for a writer that never comes."""
    os.mkfifo(folder / f"{FIRST}.jsonl")
    return f"{FIRST}.jsonl"


def plant_socket(folder: Path, outside: Path) -> str:
    short = Path(tempfile.mkdtemp(prefix="s-", dir="/tmp")) / "s"  # a socket's path is at most 107 bytes
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(short))
    short.rename(folder / f"{FIRST}.jsonl")
    short.parent.rmdir()
    return f"{FIRST}.jsonl"


PLANTS: list[tuple[Callable[[Path, Path], str], str, int]] = [
    (plant_unsigned, "spool_forged", 3), (plant_forged_mac, "spool_forged", 3), (plant_wrong_type, "spool_forged", 1),
    (plant_truncated, "spool_torn", 1), (plant_symlink_outside, "spool_bad_file", 1),
    (plant_symlink_passwd, "spool_bad_file", 1), (plant_fifo, "spool_bad_file", 1),
    (plant_socket, "spool_bad_file", 1)]


@pytest.fixture
async def prefix(engine: Engine) -> AsyncIterator[str]:
    async with own_prefix(engine, "test-access-hostile") as name:
        yield name


def section(prefix: str, spool_dir: Path, url: str) -> dict[str, Any]:
    return {"index": prefix, "url": url, "flush_interval_s": 0.1, "max_delay_s": 0.6, "spool_dir": str(spool_dir)}


async def ask(client: Any, tag: str, given: list[str]) -> int:
    execution = f"{tag}-{uuid.uuid4().hex[:8]}"
    response = await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": execution}),
                                 json=calls.body(executionId=execution))
    if response.status == 200:
        given.append(response.headers["X-Access-Record"])
    return response.status


async def spool_until_filed(client: Any, spool_dir: Path, tag: str, given: list[str]) -> Path:
    """Answers while the sink is down until the service has spooled a file; the folder it spools to."""
    deadline = time.monotonic() + 15
    while not (found := entries(spool_dir, "*/spool-*.jsonl")):
        assert time.monotonic() < deadline, "nothing was spooled"
        assert await ask(client, tag, given) == 200
        await asyncio.sleep(0.05)
    return found[0].parent


async def metrics_of(client: Any) -> str:
    text: str = await (await client.get("/metrics")).text()
    return text


@pytest.mark.parametrize(("plant", "reason", "counted"),
                         [pytest.param(*p, id=p[0].__name__.removeprefix("plant_").replace("_", "-")) for p in PLANTS])
async def test_what_the_service_did_not_spool_never_reaches_the_index(
        engine, kb, client_for, prefix, tmp_path, caplog, plant: Callable[[Path, Path], str], reason: str,
        counted: int) -> None:
    await load_records(engine, kb, DOCS)
    front = await RecordsFront(engine.url).start()
    folder: Path | None = None
    try:
        client = await client_for(kb, access_log=section(prefix, tmp_path / "spool", front.url))
        given: list[str] = []
        assert await ask(client, "up", given) == 200
        front.down = True
        folder = await spool_until_filed(client, tmp_path / "spool", "down", given)
        name = plant(folder, tmp_path)
        front.down = False
        for _ in range(10):
            assert await ask(client, "back", given) == 200
            await asyncio.sleep(0.05)
        found = await record_ids(engine, prefix, set(given), 20.0, poll_s=0.3)
        missing = set(given) - found
        assert not missing, f"{len(missing)} of {len(given)} answers given have no record"
        assert not found & PLANTED_IDS, "a planted record reached the index"
        ids = await written_ids(engine, prefix)
        assert len(ids) == len(set(ids))  # each once
        dropped = 0.0
        for _ in range(50):  # the refusal is counted when the file is claimed; the drain may still be at it
            dropped = metric(await metrics_of(client), f'es_provider_access_records_dropped_total{{reason="{reason}"}}')
            if dropped >= counted:
                break
            await asyncio.sleep(0.1)
        assert dropped == counted
        deadline = time.monotonic() + 10
        while left := entries(folder, "spool-*"):  # drained, or set aside: none claimed again
            assert time.monotonic() < deadline, left
            await asyncio.sleep(0.1)
        refusals = [r.getMessage() for r in caplog.records if name in r.getMessage()]
        assert refusals, "the refusal was not logged"
        assert MARK not in caplog.text and "invented-doc" not in caplog.text and "root:" not in caplog.text
        assert (await client.get("/readyz")).status == 200
    finally:
        unblock(folder)
        await front.close()


async def test_two_services_with_different_clusters_never_share_a_spool(engine, kb, client_for, prefix,
                                                                        tmp_path, caplog) -> None:
    """One host, one spool_dir, one index prefix, two clusters (two URLs: here two fronts of the one node, each
    keeping what reached it). Both spool during an outage; the second stops while its cluster is still down (its
    records stay in the spool for its next start); the first comes back and drains only its own records, and a file
    of the second's copied into its folder is refused there. The second's next start drains them into its own."""
    await load_records(engine, kb, DOCS)
    fronts = [await RecordsFront(engine.url).start(), await RecordsFront(engine.url).start()]
    spool_dir = tmp_path / "spool"
    try:
        clients = [await client_for(kb, access_log=section(prefix, spool_dir, front.url)) for front in fronts]
        given: list[list[str]] = [[], []]
        for front in fronts:
            front.down = True
        for n, client in enumerate(clients):
            await spool_until_filed(client, spool_dir, f"c{n}", given[n])
            for _ in range(5):
                assert await ask(client, f"c{n}", given[n]) == 200
        await clients[1].close()  # the second stops: what it could not write is in the spool, unlocked
        folders = sorted({p.parent for p in entries(spool_dir, "*/spool-*.jsonl")})
        assert len(folders) == 2, "two clusters' records are spooled to one folder"
        second = next(f for f in folders if any(given[1][0].encode() in p.read_bytes() for p in entries(f, "spool-*")))
        first = next(f for f in folders if f != second)
        copied = entries(second, "spool-*.jsonl")[0]
        shutil.copy(copied, first / f"{FIRST}.jsonl")

        fronts[0].down = False
        assert set(given[0]) <= await record_ids(engine, prefix, set(given[0]), 20.0, poll_s=0.3)
        await asyncio.sleep(1.5)  # time for a drain that would take the other's files
        assert not set(fronts[0].written) & set(given[1]), "the second cluster's records reached the first"
        assert metric(await metrics_of(clients[0]), 'es_provider_access_records_dropped_total{reason="spool_forged"}') \
            == copied.read_bytes().count(b"\n")
        assert any(f"{FIRST}.jsonl" in r.getMessage() for r in caplog.records)

        fronts[1].down = False
        restarted = await client_for(kb, access_log=section(prefix, spool_dir, fronts[1].url))
        assert await ask(restarted, "c1-back", given[1]) == 200
        everything = set(given[0]) | set(given[1])
        assert everything <= await record_ids(engine, prefix, everything, 20.0, poll_s=0.3)
        assert set(given[1]) <= set(fronts[1].written) and not set(fronts[1].written) & set(given[0])
        ids = await written_ids(engine, prefix)
        assert len(ids) == len(set(ids)) and not set(ids) - everything
    finally:
        for front in fronts:
            await front.close()
