"""The writes of every match of a query through the Engine — delete, update and reindex — by the engine's
`_delete_by_query`/`_update_by_query`/`_reindex` where it has them (OpenSearch; Elasticsearch with its `reindex`
module), else the same writes through core APIs: a scroll over the matches, then bulk writes guarded by each hit's
sequence number. Separate because both paths must answer alike, and only this module chooses between them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from opensearchpy.helpers import async_scan

from es_provider.engine.bulk import Bulk
from es_provider.engine.errors import check_by_query, engine_errors

log = logging.getLogger("es_provider.engine")


class ByQuery(Bulk):
    """The Engine's (client.py) writes by query, with their core-API fallbacks."""

    async def by_query_available(self) -> bool:
        """Whether the engine runs `_update_by_query`, `_delete_by_query` and `_reindex` (OpenSearch always; an
        Elasticsearch cluster with its `reindex` module). Without them the same writes go through core APIs:
        a scroll over the matches, then bulk writes (below)."""
        if self._by_query is None:
            self._by_query = not (await self.flavor()).elastic or await self._every_node(
                "modules", lambda name: name == "reindex")
            log.debug("by-query writes: %s", "engine APIs" if self._by_query else "scroll + bulk (core APIs)")
        return self._by_query

    async def delete_by_query(self, index: str, query: dict[str, Any], *, refresh: bool = True) -> int:
        if not await self.by_query_available():
            return await self._delete_each(index, query, refresh=refresh)

        async def run(left: float) -> int:
            response = await self._client.delete_by_query(
                index=index, body={"query": query}, refresh=refresh, conflicts="proceed", request_timeout=left
            )
            check_by_query(response)
            return int(response.get("deleted", 0))

        return await self._call(None, run)

    async def update_by_query(self, index: str, query: dict[str, Any], script: dict[str, Any],
                              change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Runs `script` on every match (or, without by-query support, applies `change` — the same edit in Python,
        returning the fields to set — through scroll + bulk updates guarded by each hit's sequence number), then
        refreshes, so the change is searchable when this returns. The answer counts `updated` and
        `version_conflicts` (a chunk that changed meanwhile: the caller runs the update again)."""
        if not await self.by_query_available():
            return await self._update_each(index, query, change)

        async def run(left: float) -> dict[str, Any]:
            response: dict[str, Any] = await self._client.update_by_query(
                index=index, body={"query": query, "script": script}, refresh=True, conflicts="proceed",
                request_timeout=left,
            )
            check_by_query(response)
            return response

        return await self._call(None, run, retry=False)

    async def reindex(self, source: str, dest: str) -> dict[str, Any]:
        if not await self.by_query_available():
            return await self._copy_each(source, dest)

        async def run(left: float) -> dict[str, Any]:
            response: dict[str, Any] = await self._client.reindex(
                body={"source": {"index": source}, "dest": {"index": dest}},
                refresh=True, wait_for_completion=True, request_timeout=left,
            )
            return response

        return await self._call(None, run, retry=False)

    # --- the same writes through core APIs (scroll + bulk), for engines without the reindex module ---

    async def _matches(self, index: str, query: dict[str, Any], *, source: bool) -> AsyncIterator[dict[str, Any]]:
        with engine_errors():
            await self.connection.prepare()  # as _call does: streams start outside it
            async for hit in async_scan(self._client, index=index, size=500, scroll="5m",
                                        request_timeout=self._timeout_s, _source=source,
                                        query={"query": query, "seq_no_primary_term": True}):
                yield hit

    async def _bulk_outcomes(self, actions: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
        """Counts a bulk run's outcomes in `_by_query` terms: done, version conflicts, failures (status, cause)."""
        done = conflicts = 0
        failures: list[dict[str, Any]] = []
        async for ok, item in self.bulk(actions):
            info = next(iter(item.values()))
            status = info.get("status")
            if ok:
                done += 1
            elif status == 409:
                conflicts += 1
            elif status != 404:  # 404: gone meanwhile, nothing left to change or delete
                failures.append({"status": status, "cause": info.get("error")})
        return {"done": done, "version_conflicts": conflicts, "failures": failures}

    async def _update_each(self, index: str, query: dict[str, Any],
                           change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        async def actions() -> AsyncIterator[dict[str, Any]]:
            async for hit in self._matches(index, query, source=True):
                yield {"_op_type": "update", "_index": hit["_index"], "_id": hit["_id"],
                       "if_seq_no": hit["_seq_no"], "if_primary_term": hit["_primary_term"],
                       "doc": change(dict(hit.get("_source") or {}))}

        outcome = await self._bulk_outcomes(actions())
        check_by_query(outcome)
        await self.refresh(index)
        return {"updated": outcome["done"], "version_conflicts": outcome["version_conflicts"], "failures": []}

    async def _delete_each(self, index: str, query: dict[str, Any], *, refresh: bool) -> int:
        async def actions() -> AsyncIterator[dict[str, Any]]:
            async for hit in self._matches(index, query, source=False):
                yield {"_op_type": "delete", "_index": hit["_index"], "_id": hit["_id"],
                       "if_seq_no": hit["_seq_no"], "if_primary_term": hit["_primary_term"]}

        outcome = await self._bulk_outcomes(actions())
        check_by_query(outcome)
        if outcome["version_conflicts"]:
            # Rewritten since the scroll read it (conflicts=proceed would skip it; a delete must not): again.
            return int(outcome["done"]) + await self._delete_each(index, query, refresh=refresh)
        if refresh:
            await self.refresh(index)
        return int(outcome["done"])

    async def _copy_each(self, source: str, dest: str) -> dict[str, Any]:
        async def actions() -> AsyncIterator[dict[str, Any]]:
            async for hit in self._matches(source, {"match_all": {}}, source=True):
                yield {"_op_type": "index", "_index": dest, "_id": hit["_id"], "_source": hit.get("_source") or {}}

        outcome = await self._bulk_outcomes(actions())
        await self.refresh(dest)
        return {"created": outcome["done"], "failures": outcome["failures"]}
