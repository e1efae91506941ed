"""12. SCIM load (issue 37, finding 4): one authenticated SCIM request used to hold the event loop for seconds (a
PATCH of 300 path-filtered removes on a 1,200-member group 13 s, a 2,000-term `.search` filter 7-8 s, a one-member
PATCH on a 30,000-member group 4 s), /healthz unanswered and SparkTide answered 504. Now each request is bounded
(scim_bounds: a 400 before any parsing) and handled on the SCIM worker's own loop. A calm SparkTide caller (one
request at a time, 10 s deadline) is timed alone, then while four SCIM senders loop the four shapes at the bounds;
its p50/p99 are recorded beside each other, and /healthz keeps answering."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from helpers.calls import ROUTE, body, headers
from helpers.scim_calls import SCIM, TOKEN, patch
from helpers.served import Served, kb_entry, p99, write_config
from helpers.setup import HEAVY, TEST_ENV, load_records

from es_provider.scim.bounds import MAX_FILTER_TERMS, MAX_GROUP_MEMBERS, MAX_OPERATIONS

# A calm caller's p50/p99 alone and beside the SCIM senders, /healthz answering meanwhile: timed, so `make test` runs it alone, after the parallel run (-m timing), so other tests' load cannot fail it.
pytestmark = pytest.mark.timing

PHASE_SECONDS = 20 if HEAVY else 12
USERS = 200
DOCS = [{"document_id": f"d{i}", "title": f"installation {i}", "content": f"installation note {i} alpha beta",
         "tenant_id": "team-a", "acl": {"public": True}} for i in range(100)]


@pytest.fixture
async def service(engine, kb, opensearch, tmp_path) -> Any:
    await load_records(engine, kb, DOCS)
    index = f"test-principals-{uuid.uuid4().hex}"
    entry = kb_entry(kb.alias)
    config = write_config(tmp_path / "config.toml", opensearch.url, [entry], sections={
        "scim": {"enabled": True, "token_ref": "SCIM_TOKEN"}, "directory": {"index": index}})
    served = Served(config, {**TEST_ENV, "SCIM_TOKEN": TOKEN, "OPENSEARCH_URL": opensearch.url},
                    tmp_path / "service.log")
    yield served
    served.stop()
    if await engine.index_exists(index):
        await engine.delete_index(index)


def removes(values: list[str]) -> bytes:
    return patch(*({"op": "remove", "path": f'members[value eq "{value}"]'} for value in values))


def ors(names: list[str]) -> str:
    return " or ".join(f'userName eq "{name}"' for name in names)


class Scim:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = f"{base}/scim/v2"
        self.statuses: Counter[tuple[str, int]] = Counter()

    async def send(self, shape: str, method: str, path: str, data: bytes) -> dict[str, Any]:
        async with self.session.request(method, self.base + path, data=data, headers=SCIM,
                                        timeout=aiohttp.ClientTimeout(total=300)) as response:
            self.statuses[(shape, response.status)] += 1
            raw = await response.read()
            return dict(orjson.loads(raw)) if raw else {}


async def setup(scim: Scim) -> tuple[str, list[str], list[str]]:
    """USERS users; a group at MAX_GROUP_MEMBERS - 1 members (its first MAX_OPERATIONS are users), built by PATCHes
    of 1,000 members (under the default 64 KB body)."""
    names = [f"user{n}@example.com" for n in range(USERS)]
    users: list[str] = []
    for start in range(0, USERS, 8):
        made = await asyncio.gather(*(scim.send("setup", "POST", "/Users", orjson.dumps(
            {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": name}))
            for name in names[start:start + 8]))
        users += [user["id"] for user in made]
    group = await scim.send("setup", "POST", "/Groups", orjson.dumps(
        {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": "everyone"}))
    members = users[:MAX_OPERATIONS] + [uuid.uuid4().hex for _ in range(MAX_GROUP_MEMBERS - 1 - MAX_OPERATIONS)]
    for start in range(0, len(members), 1000):
        await scim.send("setup", "PATCH", f"/Groups/{group['id']}", patch(
            {"op": "add", "path": "members", "value": [{"value": v} for v in members[start:start + 1000]]}))
    assert set(scim.statuses) == {("setup", 201), ("setup", 200)}, scim.statuses
    return group["id"], users, names


def shapes(scim: Scim, group: str, users: list[str], names: list[str]) -> list[Callable[[], Awaitable[Any]]]:
    """The four shapes, at the bounds (and past them: refused at once)."""
    path = f"/Groups/{group}"
    moved = users[:MAX_OPERATIONS]

    async def filtered_removes() -> None:  # MAX_OPERATIONS path-filtered removes, then as many single adds
        await scim.send("removes", "PATCH", path, removes(moved))
        await scim.send("removes", "PATCH", path, patch(*({"op": "add", "path": "members", "value": [{"value": v}]}
                                                          for v in moved)))

    async def past_the_bounds() -> None:  # 300 and 700 removes: 400 before anything is parsed
        await scim.send("past", "PATCH", path, removes([uuid.uuid4().hex for _ in range(300)]))
        await scim.send("past", "PATCH", path, removes([uuid.uuid4().hex for _ in range(700)]))
        await scim.send("past", "POST", "/Users/.search", orjson.dumps({"filter": ors(names * 10)}))

    async def search() -> None:  # an `or` of MAX_FILTER_TERMS userNames, at the root and on /Users
        terms = ors(names[:MAX_FILTER_TERMS])
        await scim.send("search", "POST", "/.search", orjson.dumps({"filter": terms}))
        await scim.send("search", "POST", "/Users/.search", orjson.dumps({"filter": terms}))

    async def one_member() -> None:  # one member in and out of the group at its bound
        extra = uuid.uuid4().hex
        await scim.send("one", "PATCH", path, patch({"op": "add", "path": "members", "value": [{"value": extra}]}))
        await scim.send("one", "PATCH", path, removes([extra]))

    return [filtered_removes, past_the_bounds, search, one_member]


async def calm(session: aiohttp.ClientSession, base: str, seconds: float) -> tuple[list[float], Counter[int]]:
    """SparkTide, one request at a time for `seconds`, each with a 10 s deadline: latencies (ms) and statuses."""
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        execution = f"exec-{uuid.uuid4().hex}"
        started = time.monotonic()
        try:
            async with session.post(base + ROUTE, data=orjson.dumps(body(executionId=execution)),
                                    headers=headers(**{"Idempotency-Key": execution}),
                                    timeout=aiohttp.ClientTimeout(total=15)) as response:
                await response.read()
                statuses[response.status] += 1
        except TimeoutError:
            statuses[0] += 1  # no answer in 15 s
        latencies.append((time.monotonic() - started) * 1000)
    return latencies, statuses


async def health(session: aiohttp.ClientSession, base: str, stop: asyncio.Event) -> list[float]:
    """/healthz every 0.2 s while `stop` is unset: its latencies (ms; 5 s or more: unanswered)."""
    latencies = []
    while not stop.is_set():
        started = time.monotonic()
        try:
            async with session.get(f"{base}/healthz", timeout=aiohttp.ClientTimeout(total=5)) as response:
                assert response.status == 200
        except TimeoutError:
            pass
        latencies.append((time.monotonic() - started) * 1000)
        await asyncio.sleep(0.2)
    return latencies


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def test_scim_at_its_bounds_starves_no_platform_caller(service: Served, opensearch, figures) -> None:
    async with aiohttp.ClientSession() as session:
        scim = Scim(session, service.base)
        started = time.monotonic()
        group, users, names = await setup(scim)
        setup_s = time.monotonic() - started
        alone, alone_statuses = await calm(session, service.base, PHASE_SECONDS)

        stop = asyncio.Event()
        times: dict[str, list[float]] = {}

        async def loop(shape: Callable[[], Awaitable[Any]]) -> None:
            while not stop.is_set():
                began = time.monotonic()
                await shape()
                times.setdefault(shape.__name__, []).append(time.monotonic() - began)

        senders = [asyncio.ensure_future(loop(shape)) for shape in shapes(scim, group, users, names)]
        healthz = asyncio.ensure_future(health(session, service.base, stop))
        await asyncio.sleep(1)
        cpu_before = service.cpu_seconds()
        loaded, loaded_statuses = await calm(session, service.base, PHASE_SECONDS)
        cpu = service.cpu_seconds() - cpu_before
        stop.set()
        await asyncio.gather(*senders)
        health_ms = await healthz

    scim_statuses = {f"{shape} {status}": n for (shape, status), n in sorted(scim.statuses.items())
                     if shape != "setup"}
    rounds = {name: f"{len(spent)} x {median(spent):.1f} s" for name, spent in times.items()}
    figures("13. SCIM load (issue 37)",
            f"{opensearch.name} {opensearch.version}: a calm SparkTide caller (one request at a time, 10 s deadline) "
            f"for {PHASE_SECONDS} s, p50 / p99: {median(alone):.1f} / {p99(alone):.1f} ms alone "
            f"({len(alone)} answers); {median(loaded):.1f} / {p99(loaded):.1f} ms ({len(loaded)} answers) while 4 "
            f"SCIM senders looped the four shapes at the bounds on a group of {MAX_GROUP_MEMBERS - 1} members and "
            f"{USERS} users ({MAX_OPERATIONS} path-filtered removes then {MAX_OPERATIONS} single adds; 300 and 700 "
            f"removes and a 2,000-term filter, refused; a {MAX_FILTER_TERMS}-term `or` .search at the root and on "
            f"/Users; one member in and out): rounds (count x median) {rounds}; SCIM answers {scim_statuses}; the "
            f"service spent {cpu:.1f} s CPU in those {PHASE_SECONDS} s; /healthz every 0.2 s, slowest "
            f"{max(health_ms):.0f} ms. Calm statuses {dict(alone_statuses)} alone, {dict(loaded_statuses)} under "
            f"load. Setup (users, group) {setup_s:.0f} s")
    assert alone_statuses == Counter({200: len(alone)}) and loaded_statuses == Counter({200: len(loaded)})
    # Every shape past a bound is a 400 (the 700 removes, 73 KB, a 413 from the body bound), and the ones at the
    # bounds are served.
    assert scim.statuses[("past", 400)] > 0 and not [key for key in scim.statuses if key[0] == "past"
                                                    and key[1] not in (400, 413)]
    assert all(scim.statuses[(shape, 200)] > 0 for shape in ("removes", "search", "one")), scim.statuses
    assert not [key for key in scim.statuses if key[1] >= 500], scim.statuses
    # Before: the calm caller saw 504s and /healthz went unanswered for as long as one SCIM request ran.
    assert max(health_ms) < 2000, max(health_ms)
    assert p99(loaded) < min(5000, 4 * p99(alone) + 500), (p99(alone), p99(loaded))
