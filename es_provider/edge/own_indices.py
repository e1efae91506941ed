"""The service's own indices — the replay store, the principal store and the access record's days — listed from
the settings (`wanted`, pure), made ahead of their first write by `es-provider prepare` (a user of the ingest duty)
and checked by the serving process (`IndexMaker`): a serve user that may not create indices then finds them there, the
next day's access index included, and `/readyz` says which one is missing instead of a request failing first.
Made here, never by a write: a node's auto-creation would give them dynamic mappings (their keywords as text).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from es_provider.audit import access
from es_provider.config.settings import Settings
from es_provider.core.errors import KnowledgeError
from es_provider.edge import replays
from es_provider.engine.client import Engine
from es_provider.identity import directory

log = logging.getLogger("es_provider.own_indices")

# How often the serving process looks again (and makes the next access day ahead of midnight).
EVERY_S = 3600.0


@dataclass(frozen=True)
class OwnIndex:
    name: str
    body: dict[str, Any]
    purpose: str
    access: bool = False  # on [access_log.engine]'s cluster when that is set
    due: bool = True  # needed now (False: tomorrow's access index, made ahead)


def wanted(settings: Settings, today: dt.date, days: int = 2, *, serving: bool = False) -> list[OwnIndex]:
    """Pure: the indices these settings use, the access record's for `days` days from `today` (UTC). `serving`:
    only those a `serve` process writes (the principal store only when it serves SCIM; `es-provider principals`
    writes it otherwise)."""
    found: list[OwnIndex] = []
    if settings.shares_replays():
        found.append(OwnIndex(settings.server.replay_index, replays.INDEX_BODY, "replay store (signed callbacks)"))
    if settings.scim.enabled or (settings.uses_directory() and not serving):
        found.append(OwnIndex(settings.directory.index, directory.INDEX_BODY, "principal store"))
    config = settings.access_log
    if config.enabled and "index" in config.sinks:
        for n in range(days):
            day = today + dt.timedelta(days=n)
            found.append(OwnIndex(access.day_index(config.index, day), access.INDEX_BODY, f"access record of {day}",
                                  access=True, due=n == 0))
    return found


def forbidden_to_look(exc: KnowledgeError) -> bool:
    """A 403 on looking whether the index is there (not on making it): it may well exist, so "missing" would be
    wrong and `prepare` would not help."""
    cause = exc.__cause__
    status = getattr(cause, "status_code", None)
    return status == 403 and "indices:admin/create" not in str(getattr(cause, "info", "")) + (exc.detail or "")


def today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


async def ensure(engine: Engine, index: OwnIndex) -> bool:
    """True when this call made it; raises (a KnowledgeError naming the privilege) when it is missing and cannot
    be made."""
    return await engine.ensure_index(index.name, index.body)


class IndexMaker:
    """The serving process's side: makes what is missing (today's and tomorrow's access index included, so a day
    never begins without its index), and keeps what it could not make as the reason `/readyz` gives until a later
    look finds it there."""

    def __init__(self, engine: Engine, indices: Callable[[], list[OwnIndex]]) -> None:
        self._engine = engine
        self._indices = indices
        self.problems: dict[str, str] = {}  # index → why it is missing and was not made (due now only)
        self.forbidden: set[str] = set()  # of those, the ones the engine user may not even look at (403)
        self._checked = False
        self.looked = asyncio.Event()  # set after the first look (the start waits a moment for it)

    async def check(self) -> dict[str, str]:
        problems: dict[str, str] = {}
        forbidden: set[str] = set()
        for index in self._indices():
            try:
                if await ensure(self._engine, index):
                    log.info("made the %s index %s", index.purpose, index.name)
            except KnowledgeError as exc:
                if index.due:
                    problems[index.name] = exc.detail or exc.code.value
                if forbidden_to_look(exc):
                    forbidden.add(index.name)
                    log.warning("the %s index %s cannot be looked at: the engine user may not read it (%s); grant "
                                "the serve duty's role (`es-provider check --duty serve`)", index.purpose, index.name,
                                exc.detail)
                else:
                    log.warning("the %s index %s is missing and cannot be made (%s): run `es-provider prepare` as a "
                                "user of the ingest duty", index.purpose, index.name, exc.detail)
        self.problems, self.forbidden, self._checked = problems, forbidden & set(problems), True
        self.looked.set()
        return problems

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(EVERY_S)

    async def start(self, wait_s: float) -> asyncio.Task[None]:
        """`run` in the background, after waiting up to `wait_s` for its first look: what the engine answers at
        once is made before the first request."""
        task = asyncio.create_task(self.run())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.looked.wait(), wait_s)
        return task

    async def ready(self) -> dict[str, str]:
        """Why it is not ready (index → reason); looked at again while there is a reason (`prepare` may have run)."""
        return await self.check() if self.problems or not self._checked else {}
