"""The one retry policy for optimistic writes: a conditional write that lost its race to another writer (the
engine's VersionConflict, SCIM's Raced) reads again and tries again, up to TRIES tries in all, after a short random
wait that doubles with each loss, so racing writers drift apart. When the tries run out, the last loss is raised
as it was. Pure policy on tenacity: imports no other module of the package."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

TRIES = 16  # a conditional write that keeps losing gives up after this many tries (2.1–4.2 s of waits in all)
FIRST_WAIT_S = 0.005
LONGEST_WAIT_S = 0.2


def backoff(lost: int, draw: float) -> float:
    """The wait after `lost` lost races (1, 2, …): FIRST_WAIT_S doubling up to LONGEST_WAIT_S, stretched by
    1 + `draw` (`draw` in [0, 1))."""
    return (1 + draw) * min(LONGEST_WAIT_S, FIRST_WAIT_S * 2.0 ** (lost - 1))


def _wait(retry_state: RetryCallState) -> float:
    return backoff(retry_state.attempt_number, secrets.randbelow(1000) / 1000)


def retrying(*lost: type[BaseException],
             sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> AsyncRetrying:
    """`async for attempt in retrying(Raced): with attempt: …` tries the block again while it raises one of
    `lost`; anything else is raised at once. `sleep` is for tests."""
    return AsyncRetrying(retry=retry_if_exception_type(lost), stop=stop_after_attempt(TRIES), wait=_wait,
                         sleep=sleep, reraise=True)
