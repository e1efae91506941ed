"""Many documents written in one request through the Engine: `append` (create-only rows in one `_bulk` on the
HTTP/1.1 client, making a missing index) and `bulk` (opensearch-py's streaming bulk, each action's outcome yielded).
Separate from the single-document operations; the by-query fallbacks write through `bulk` too.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

import orjson
from opensearchpy.helpers import async_streaming_bulk

from es_provider.core.deadline import Budget
from es_provider.engine.errors import engine_errors
from es_provider.engine.indices import IndexAdmin


class Bulk(IndexAdmin):
    """The Engine's (client.py) writes of many documents in one request."""

    async def append(self, rows: list[tuple[str, str, bytes]], index_body: dict[str, Any],
                     budget: Budget | None = None) -> list[tuple[int, int, str]]:
        """Create-only writes of serialised documents `(index, id, document)` in one `_bulk` through the search
        client; an index that does not exist yet is made with `index_body` and its rows sent again (nodes may refuse
        to create indices on write). Written twice (a retry after a lost answer), a row is a 409, not a second copy.
        Returns the rows not written: (position, status, error type)."""
        for index in sorted({index for index, _, _ in rows}):  # made with its mappings before its first write
            await self._ensure_index(index, index_body, budget)
        failed = await self._append_once(rows, budget)
        missing = [position for position, status, _ in failed if status == 404]
        if not missing:
            return failed
        for index in sorted({rows[p][0] for p in missing}):
            async def make(left: float, index: str = index) -> None:
                await self._make_index(index, index_body, left)

            await self._call(budget, make)
        again = await self._append_once([rows[p] for p in missing], budget)
        return [f for f in failed if f[1] != 404] + [(missing[p], status, kind) for p, status, kind in again]

    async def _append_once(self, rows: list[tuple[str, str, bytes]],
                           budget: Budget | None) -> list[tuple[int, int, str]]:
        payload = b"".join(orjson.dumps({"create": {"_index": index, "_id": doc_id}}) + b"\n" + document + b"\n"
                           for index, doc_id, document in rows)

        async def run(_: float) -> dict[str, Any]:
            return await self._http1.post("/_bulk", payload, "application/x-ndjson")

        answer = await self._call(budget, run)
        if not answer.get("errors"):
            return []
        failed = []
        for position, item in enumerate(answer.get("items", [])):
            outcome: dict[str, Any] = next(iter(item.values()), {}) if isinstance(item, dict) else {}
            status = int(outcome.get("status", 0))
            if status >= 300 and status != 409:
                error = outcome.get("error")
                failed.append((position, status, str(error.get("type") if isinstance(error, dict) else error)))
        return failed

    async def bulk(
        self,
        actions: AsyncIterable[dict[str, Any]] | Iterable[dict[str, Any]],
        *,
        chunk_size: int = 500,
        max_chunk_bytes: int = 5 * 1024 * 1024,
    ) -> AsyncIterator[tuple[bool, dict[str, Any]]]:
        """Streams per-action outcomes; failures are yielded (never raised away) so the caller can report them."""
        with engine_errors():
            await self.connection.prepare()  # as _call does: streams start outside it
            async for ok, item in async_streaming_bulk(
                self._client,
                actions,
                chunk_size=chunk_size,
                max_chunk_bytes=max_chunk_bytes,
                raise_on_error=False,
                raise_on_exception=False,
                max_retries=3,
                initial_backoff=0.5,
                request_timeout=self._timeout_s,
            ):
                yield ok, item
