"""The reads through the Engine: searches and multi-searches on the HTTP/1.1 client (timed for the metrics, each
answer checked whole), scrolls over an index, counts, and the mapped fields and metadata types behind an alias.
Separate from the writes; search and msearch are the serving hot path.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from opensearchpy.exceptions import NotFoundError, TransportError
from opensearchpy.helpers import async_scan

from es_provider.core import tracing
from es_provider.core.deadline import Budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine import dialect
from es_provider.engine.base import EngineBase
from es_provider.engine.errors import check_search, engine_errors, index_missing

# hits.max_score (null when nothing matched) keeps `hits` in every whole answer, so a 200 without it is known for
# the wrong shape it is (check_search), never read as "no match".
_SEARCH_FIELDS = ("timed_out,_shards.failed,hits.max_score,hits.hits._index,hits.hits._id,hits.hits._score,"
                  "hits.hits._source")
_MSEARCH_FIELDS = ",".join(f"responses.{field}" for field in _SEARCH_FIELDS.split(",")) + \
    ",responses.status,responses.error.type"


class Reads(EngineBase):
    """The Engine's (client.py) reads: searches, scans, counts and mappings."""

    @contextmanager
    def _observed(self, operation: str, index: str) -> Iterator[None]:
        """Times a search for the metrics, as ok or not; with traces on, its client span (core/tracing.py)."""
        started = time.monotonic()
        ok = False
        try:
            if tracing.on():
                system = "elasticsearch" if self._flavor is not None and self._flavor.elastic else "opensearch"
                with tracing.engine_span(operation, index, system, self.connection.nodes[0].host):
                    yield
            else:
                yield
            ok = True
        finally:
            if self._observe is not None:
                self._observe("search", time.monotonic() - started, ok)

    async def search(self, index: str, body: dict[str, Any], budget: Budget) -> dict[str, Any]:
        path = f"/{index}/_search?filter_path={_SEARCH_FIELDS}"  # aliases are [a-z0-9_-] (config/knowledge.py)
        payload = orjson.dumps(dialect.search_body(body, await self.flavor(budget)))

        async def run(_: float) -> dict[str, Any]:
            return await self._http1.post(path, payload)

        with self._observed("search", index):
            response = await self._call(budget, run)
            check_search(response)
        return response

    async def searchable(self, alias: str, budget: Budget) -> bool:
        """Whether the search path can search `alias` (readiness): a size-0 search through the same client, so a
        dropped path prefix, a refused credential or privilege raises as a search would; an index that is not
        there is False."""
        body = orjson.dumps({"size": 0, "track_total_hits": False, "query": {"match_none": {}}})

        async def run(_: float) -> dict[str, Any]:
            return await self._http1.post(f"/{alias}/_search", body)

        try:
            check_search(await self._call(budget, run))
        except KnowledgeError as exc:
            if isinstance(exc.__cause__, TransportError) and index_missing(exc.__cause__):
                return False
            raise
        return True

    async def msearch(self, index: str, bodies: list[dict[str, Any]], budget: Budget) -> list[dict[str, Any]]:
        """Several searches in one round trip; any failed one fails the whole call (no partial answers)."""
        path = f"/{index}/_msearch?filter_path={_MSEARCH_FIELDS}"
        flavor = await self.flavor(budget)
        payload = b"".join(b"{}\n" + orjson.dumps(dialect.search_body(body, flavor)) + b"\n" for body in bodies)

        async def run(_: float) -> dict[str, Any]:
            return await self._http1.post(path, payload, "application/x-ndjson")

        with self._observed("msearch", index):
            responses = (await self._call(budget, run)).get("responses")
            if not isinstance(responses, list) or len(responses) != len(bodies):
                raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="msearch answered the wrong number of responses")
            for response in responses:
                check_search(response)
        return responses

    async def scan(self, index: str, *, page: int = 500,
                   query: dict[str, Any] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Every document of `index` (id and _source) matching `query` (all by default), in pages, under one
        point-in-time-free scroll."""
        with engine_errors():
            await self.connection.prepare()  # as _call does: streams start outside it
            async for hit in async_scan(self._client, index=index, size=page, scroll="5m",
                                        request_timeout=self._timeout_s,
                                        query={"query": query or {"match_all": {}}}):
                yield hit

    async def scan_fields(self, index: str, query: dict[str, Any], fields: list[str], *,
                          page: int = 1000) -> AsyncIterator[dict[str, Any]]:
        """The `_source` of every match of `query`, with only `fields`, under one scroll: listings longer than a
        search may return (the documents an ingest sync holds), without the chunks' text."""
        with engine_errors():
            await self.connection.prepare()  # as _call does: streams start outside it
            async for hit in async_scan(self._client, index=index, size=page, scroll="5m",
                                        request_timeout=self._timeout_s, query={"query": query, "_source": fields}):
                yield hit.get("_source") or {}

    async def _field_mappings(self, index: str, fields: str, left: float) -> dict[str, Any]:
        try:
            response: dict[str, Any] = await self._client.indices.get_field_mapping(
                index=index, fields=fields, request_timeout=left)
        except NotFoundError as exc:
            if not exc.info:  # the security plugin's silent refusal: 404 and no body
                raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=(
                    f"engine refused a privilege (404 with no body): the field mappings behind {index} "
                    "(indices:admin/mappings/fields/get[index]); `es-provider check --duty serve` lists what to "
                    "grant")) from None
            raise
        return response

    async def mapped_fields(self, index: str, fields: tuple[str, ...], budget: Budget) -> set[str]:
        """Fields mapped in EVERY index behind `index` (a field missing from one index is not enforceable there)."""

        async def run(left: float) -> set[str]:
            response = await self._field_mappings(index, ",".join(fields), left)
            per_index = [set((body.get("mappings") or {}).keys()) for body in response.values()]
            return set.intersection(*per_index) if per_index else set()

        return await self._call(budget, run)

    async def field_specs(self, index: str, fields: tuple[str, ...],
                          budget: Budget) -> dict[str, dict[str, dict[str, Any]]]:
        """Each index behind `index` → each of `fields` it maps → that field's mapping (type, dimension, …)."""

        async def run(left: float) -> dict[str, dict[str, dict[str, Any]]]:
            response = await self._field_mappings(index, ",".join(fields), left)
            specs: dict[str, dict[str, dict[str, Any]]] = {}
            for name, body in response.items():
                mapped = specs.setdefault(name, {})
                for full_name, spec in (body.get("mappings") or {}).items():
                    leaf = full_name.rsplit(".", 1)[-1]
                    mapped[full_name] = dict((spec.get("mapping") or {}).get(leaf) or {})
            return specs

        return await self._call(budget, run)

    async def metadata_types(self, index: str, budget: Budget) -> dict[str, str]:
        """Mapped type of every `metadata.*` field behind `index` (for translating metadata conditions)."""

        async def run(left: float) -> dict[str, str]:
            response = await self._field_mappings(index, "metadata.*", left)
            types: dict[str, str] = {}
            for body in response.values():
                for full_name, spec in (body.get("mappings") or {}).items():
                    leaf = full_name.rsplit(".", 1)[-1]
                    kind = (spec.get("mapping") or {}).get(leaf, {}).get("type")
                    if isinstance(kind, str) and kind != "object":
                        types.setdefault(full_name.removeprefix("metadata."), kind)
            return types

        return await self._call(budget, run)

    async def count(self, index: str, query: dict[str, Any] | None = None) -> int:
        async def run(left: float) -> int:
            body = {"query": query} if query else None
            response = await self._client.count(index=index, body=body, request_timeout=left)
            return int(response["count"])

        return await self._call(None, run)
