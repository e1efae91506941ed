"""Whether the engine user holds the serve duty's privileges (engine/privileges.py), as readiness last found them:
`/readyz` probes them (engine/probes.py, at most once per `every_s`) and is not ready while any is missing, and
every platform request is then refused as unavailable naming them — the service runs with the privileges
docs/cluster.md states or not at all, so no answer comes from a partial view (a privilege refused on a path a
request does not take). Only readiness probes: requests add no engine traffic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from es_provider.config.settings import Settings
from es_provider.core.deadline import Budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.client import Engine
from es_provider.engine.privileges import Duty
from es_provider.engine.probes import Finding, Status, names_of, privileges_of

log = logging.getLogger("es_provider.grants")
EVERY_S = 60.0
AGAIN_S = 5.0  # while a privilege is missing


def named(findings: list[Finding]) -> str:
    return ", ".join(f"{f.privilege.action} on {f.on}" for f in findings)


class Grants:
    def __init__(self, engine: Engine, settings: Settings, *, every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._engine = engine
        self._privileges = privileges_of(settings, Duty.SERVE)
        self._names = names_of(settings)
        self._every_s = every_s
        self._clock = clock
        self._probed_at: float | None = None
        self._missing: list[Finding] = []
        self._lock = asyncio.Lock()

    @property
    def missing(self) -> list[Finding]:
        return list(self._missing)

    async def check(self, budget: Budget | None = None) -> list[Finding]:
        """The privileges missing now (probed again when the last probe is older than `every_s`). An engine that
        cannot be asked leaves the last answer standing: readiness reports that failure on its own."""
        if self._engine.connection.serverless:  # IAM and data access policies, not the plugin's roles: not probed
            return []
        async with self._lock:
            since = None if self._probed_at is None else self._clock() - self._probed_at
            # Sooner while one is missing: a grant (or `es-provider prepare`) is seen within seconds.
            if since is None or since >= (min(self._every_s, AGAIN_S) if self._missing else self._every_s):
                findings = await self._engine.probe(self._privileges, self._names, budget=budget)
                self._probed_at = self._clock()
                missing = [f for f in findings if f.status is Status.MISSING]
                if missing != self._missing:
                    if missing:
                        log.warning("the engine user lacks privileges of the serve duty: %s; requests are refused "
                                    "until they are granted (`es-provider check --duty serve`)", named(missing))
                    elif self._missing:
                        log.warning("the serve duty's privileges are held again")
                self._missing = missing
        return self.missing

    def require(self) -> None:
        """Raises the refusal a request gets while readiness last found a privilege missing."""
        if self._missing:
            raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=(
                f"engine refused a privilege: the engine user lacks {named(self._missing)} (the serve duty, "
                "docs/cluster.md); `es-provider check --duty serve` lists what to grant"))
