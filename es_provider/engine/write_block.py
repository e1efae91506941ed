"""`wait_out_block`: how a writer goes through an alias while a reindex holds the old index's write block — waiting
it out, and writing again when the alias moved during the write. Separate from the Engine: a policy its callers
(ingest's writer, sync and admin) wrap around their writes, not an engine call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_fixed

from es_provider.core.errors import ErrorCode, KnowledgeError, WriteBlocked
from es_provider.engine.errors import AliasMoved
from es_provider.engine.indices import IndexAdmin

log = logging.getLogger("es_provider.engine")
T = TypeVar("T")


async def wait_out_block(write: Callable[[], Awaitable[T]], wait_s: float, *, engine: IndexAdmin | None = None,
                         alias: str | None = None) -> T:
    """Runs a write through the alias, waiting out an index write block (a reindex copying the index) for up to
    `wait_s`: each retry goes through the alias again, which after the swap names the new index. A write still
    blocked then fails loudly. With `engine` and `alias`, an attempt during which the alias moved is run again: a
    by-query write resolves the alias when it starts, so one that began before a swap and wrote after the old
    index's block lifted changed the retired index only (the writes passed here are idempotent)."""

    async def once() -> T:
        if engine is None or alias is None:
            return await write()
        before = await engine.alias_targets(alias)
        result = await write()
        if await engine.alias_targets(alias) != before:
            log.info("the alias %s moved during a write: writing again through it", alias)
            raise AliasMoved(ErrorCode.UNAVAILABLE, detail=f"{alias} moved during a write")
        return result

    try:
        async for attempt in AsyncRetrying(retry=retry_if_exception_type((WriteBlocked, AliasMoved)),
                                           stop=stop_after_delay(wait_s), wait=wait_fixed(0.5), reraise=True):
            with attempt:
                return await once()
    except WriteBlocked:
        raise WriteBlocked(f"the index stayed write-blocked for {wait_s:.0f} s: a reindex is running or was killed "
                           "(run `es-provider kb reindex` again to finish it); this write was not made") from None
    raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="write retry loop ended without a result")  # pragma: no cover
