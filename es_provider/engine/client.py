"""The only module that talks to OpenSearch, and the one place where its errors become domain errors: every call,
scans and bulk streams included, runs inside `engine_errors()`, so nothing the client raises leaves this module as
anything but a KnowledgeError.

Every call runs inside a budget: the client's request timeout, an asyncio timeout and the tenacity retries of
transient failures (transient.py) all stop when the budget is spent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import orjson
from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import ConnectionTimeout, NotFoundError, RequestError, TransportError
from opensearchpy.helpers import async_scan, async_streaming_bulk
from opensearchpy.serializer import JSONSerializer
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    stop_before_delay,
    wait_exponential,
    wait_fixed,
)

from es_provider.core.deadline import Budget, fixed_budget
from es_provider.core.errors import ErrorCode, KnowledgeError, WriteBlocked
from es_provider.engine import dialect
from es_provider.engine.dialect import Flavor
from es_provider.engine.http1 import Pool
from es_provider.engine.transient import blocked_write, never_sent, transient

log = logging.getLogger("es_provider.engine")
T = TypeVar("T")

def map_error(exc: BaseException) -> KnowledgeError:
    """OpenSearch / transport failure → domain error. Details go to the log, never to a caller."""
    if isinstance(exc, KnowledgeError):
        return exc
    if isinstance(exc, TimeoutError | ConnectionTimeout):
        return KnowledgeError(ErrorCode.TIMED_OUT, detail=f"engine call timed out: {type(exc).__name__}")
    if isinstance(exc, OSConnectionError):
        return KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"engine unreachable: {exc}")
    if isinstance(exc, TransportError) and blocked_write(exc.status_code, exc.info):
        return WriteBlocked(f"engine refused a write: index write-blocked ({exc.status_code})")
    if isinstance(exc, TransportError):
        status = exc.status_code if isinstance(exc.status_code, int) else 0
        if status == 429 or "rejected_execution" in str(exc.error):
            return KnowledgeError(ErrorCode.RATE_LIMITED, detail=f"engine rejected: {exc}")
        return KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"engine error {status}: {exc}")
    return KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"unexpected engine failure: {exc!r}")


@contextmanager
def engine_errors() -> Iterator[None]:
    """The error boundary (as httpx maps transport errors once): whatever the client raises inside leaves as the
    KnowledgeError `map_error` makes of it."""
    try:
        yield
    except KnowledgeError:
        raise
    except Exception as exc:
        raise map_error(exc) from exc


_SEARCH_FIELDS = "timed_out,_shards.failed,hits.hits._index,hits.hits._id,hits.hits._score,hits.hits._source"
_MSEARCH_FIELDS = ",".join(f"responses.{field}" for field in _SEARCH_FIELDS.split(",")) + \
    ",responses.status,responses.error.type"


def _check_search(response: dict[str, Any]) -> None:
    """A search response that is not a whole answer raises; a partial answer must never look complete."""
    error = response.get("error")
    if error is not None:
        status = response.get("status")
        kind = error.get("type") if isinstance(error, dict) else str(error)
        if status == 429 or "rejected_execution" in str(kind):
            raise KnowledgeError(ErrorCode.RATE_LIMITED, detail=f"engine rejected a search: {kind}")
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"engine search error {status}: {kind}")
    if response.get("timed_out"):
        raise KnowledgeError(ErrorCode.TIMED_OUT, detail="OpenSearch reported timed_out")
    shards = response.get("_shards") or {}
    if shards.get("failed"):
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"{shards.get('failed')} shard(s) failed")


def _check_by_query(response: dict[str, Any]) -> None:
    """A by-query write that left failures behind did not happen in full: never report it as done."""
    failures = response.get("failures") or []
    if any(blocked_write(f.get("status"), f.get("cause")) for f in failures):
        raise WriteBlocked(f"{len(failures)} write(s) refused: index write-blocked")
    if failures:
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"{len(failures)} write(s) failed: {failures[0]}")


def _index_missing(exc: TransportError) -> bool:
    """The engine's own "no such index", not any 404 (a proxy's, or a wrong path's): only that means "holds none"."""
    return exc.status_code == 404 and exc.error == "index_not_found_exception"


def _write_params(if_seq_no: int | None, if_primary_term: int | None) -> dict[str, Any]:
    """A principal-store write: refreshed (a search right after sees it), conditional when a version is given."""
    params: dict[str, Any] = {"refresh": "true"}
    if if_seq_no is not None and if_primary_term is not None:
        params["if_seq_no"], params["if_primary_term"] = if_seq_no, if_primary_term
    return params


class VersionConflict(KnowledgeError):
    """A conditional write (if_seq_no/if_primary_term, or a create) found the document changed or present."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, status=409, detail=detail)


class AliasMoved(KnowledgeError):
    """A reindex swapped the alias while a write through it ran: the write may have changed the retired index."""


async def wait_out_block(write: Callable[[], Awaitable[T]], wait_s: float, *, engine: Engine | None = None,
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


class OrjsonSerializer(JSONSerializer):
    """opensearch-py's serializer with orjson for bodies: several times faster on bulk and search requests."""

    def dumps(self, data: Any) -> str:
        if isinstance(data, str | bytes):
            return data  # type: ignore[return-value]
        return orjson.dumps(data, default=self.default).decode("utf-8")

    def loads(self, s: str) -> Any:
        return orjson.loads(s)


class SearchDoor:
    """The search hot path: an orjson body POSTed to the nodes in turn over kept-alive connections (http1.py),
    answered as orjson. opensearch-py's transport and aiohttp's client cost about a third of the service's CPU per
    request (docs/benchmarks.md "hot path"). Failures are raised as opensearch-py's own exception types, so the one
    error boundary (`map_error`) and the retry rule (transient.py) treat both doors alike."""

    def __init__(self, hosts: list[str]) -> None:
        self._pools = [Pool(host) for host in hosts]
        self._turn = 0

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> dict[str, Any]:
        self._turn = (self._turn + 1) % len(self._pools)
        try:
            status, raw = await self._pools[self._turn].post(path, body, content_type)
        except ConnectionError as exc:  # ConnectFailed (never sent) or Disconnected
            raise OSConnectionError("N/A", str(exc), exc) from exc
        if status >= 300:
            try:
                info: Any = orjson.loads(raw)
                error = info.get("error", {}) if isinstance(info, dict) else {}
                kind = error.get("type", str(error)) if isinstance(error, dict) else str(error)
            except orjson.JSONDecodeError:
                info, kind = raw[:2000].decode("utf-8", "replace"), "unparseable answer"
            raise TransportError(status, kind, info)
        answer: dict[str, Any] = orjson.loads(raw)
        return answer

    def close(self) -> None:
        for pool in self._pools:
            pool.close()


class UnsupportedEngineError(KnowledgeError):
    """The node answered, but is an engine this service cannot serve from (e.g. Elasticsearch 7)."""


class Engine:
    def __init__(
        self, url: str, *, timeout_s: float = 30.0, observe: Callable[[str, float, bool], None] | None = None,
        by_query: bool | None = None,
    ) -> None:
        """`by_query`: None asks the engine whether it has `_by_query`/`_reindex`; False forces the core-API path
        (tests run it on OpenSearch too)."""
        self.url = url
        self._timeout_s = timeout_s
        self._observe = observe
        # Retries are ours (tenacity, bounded by each request's budget), not the client's.
        # Several nodes may be given comma-separated: requests go round-robin, and a retry after a connection
        # failure goes to the next node.
        hosts = [host.strip() for host in url.split(",") if host.strip()]
        self._client = AsyncOpenSearch(
            hosts=hosts, timeout=timeout_s, max_retries=0, retry_on_timeout=False, serializer=OrjsonSerializer()
        )
        self._door = SearchDoor(hosts)
        self._flavor: Flavor | None = None  # which engine answers: learnt from GET / at the first call that cares
        self._by_query = by_query

    async def flavor(self, budget: Budget | None = None) -> Flavor:
        """OpenSearch or Elasticsearch, and its version (dialect.py), from the node's `GET /`, once."""
        if self._flavor is None:
            root = await self.info(budget)
            try:
                self._flavor = dialect.detect(root)
            except dialect.UnsupportedEngine as exc:
                raise UnsupportedEngineError(ErrorCode.UNAVAILABLE, detail=str(exc)) from None
            log.debug("engine: %s", self._flavor)
        return self._flavor

    async def close(self) -> None:
        await self._client.close()
        self._door.close()

    def _default_budget(self) -> Budget:
        return fixed_budget(int(self._timeout_s * 1000), now_monotonic=time.monotonic())

    async def _call(self, budget: Budget | None, call: Callable[[float], Awaitable[T]], *, retry: bool = True) -> T:
        budget = budget or self._default_budget()
        remaining = budget.remaining(time.monotonic())
        if remaining <= 0:
            raise KnowledgeError(ErrorCode.TIMED_OUT, detail="budget spent before the engine call")
        with engine_errors():
            # The first attempt runs bare (the hot path); tenacity takes over only after a transient failure.
            # A write that must not run twice (retry=False) is still sent to the next node when no node got it.
            worth_retrying = transient if retry else never_sent
            try:
                async with asyncio.timeout(remaining):
                    return await call(remaining)
            except Exception as exc:
                if not worth_retrying(exc):
                    raise
            await asyncio.sleep(min(0.05, max(0.0, budget.remaining(time.monotonic()))))
            remaining = budget.remaining(time.monotonic())
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(worth_retrying),
                stop=stop_after_attempt(2) | stop_before_delay(remaining),
                wait=wait_exponential(multiplier=0.05, max=0.5),
                reraise=True,
            ):
                with attempt:
                    left = budget.remaining(time.monotonic())
                    if left <= 0:
                        raise TimeoutError
                    async with asyncio.timeout(left):
                        return await call(left)
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="retry loop ended without a result")  # pragma: no cover

    # --- search path ---

    @contextmanager
    def _observed(self) -> Iterator[None]:
        """Times a search for the metrics, as ok or not."""
        started = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            if self._observe is not None:
                self._observe("search", time.monotonic() - started, ok)

    async def search(self, index: str, body: dict[str, Any], budget: Budget) -> dict[str, Any]:
        path = f"/{index}/_search?filter_path={_SEARCH_FIELDS}"  # aliases are [a-z0-9_-] (config.py)
        payload = orjson.dumps(dialect.search_body(body, await self.flavor(budget)))

        async def run(_: float) -> dict[str, Any]:
            return await self._door.post(path, payload)

        with self._observed():
            response = await self._call(budget, run)
            _check_search(response)
        return response

    async def msearch(self, index: str, bodies: list[dict[str, Any]], budget: Budget) -> list[dict[str, Any]]:
        """Several searches in one round trip; any failed one fails the whole call (no partial answers)."""
        path = f"/{index}/_msearch?filter_path={_MSEARCH_FIELDS}"
        flavor = await self.flavor(budget)
        payload = b"".join(b"{}\n" + orjson.dumps(dialect.search_body(body, flavor)) + b"\n" for body in bodies)

        async def run(_: float) -> dict[str, Any]:
            return await self._door.post(path, payload, "application/x-ndjson")

        with self._observed():
            responses = (await self._call(budget, run)).get("responses")
            if not isinstance(responses, list) or len(responses) != len(bodies):
                raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="msearch answered the wrong number of responses")
            for response in responses:
                _check_search(response)
        return responses

    async def knn_available(self, budget: Budget | None = None) -> bool:
        """Whether every node has the k-NN plugin (official image: "opensearch-knn"; local node: KNNPlugin).
        Elasticsearch 8 and later has kNN search built in (dense_vector)."""
        if (await self.flavor(budget)).elastic:
            return True
        return await self._every_node(
            "plugins", lambda name: "knn" in name.lower(), budget)

    async def _every_node(self, kind: str, wanted: Callable[[str], bool], budget: Budget | None = None) -> bool:
        """Whether every node lists a `kind` ("plugins" or "modules") whose name is `wanted`."""

        async def run(left: float) -> bool:
            response = await self._client.nodes.info(metric="plugins", request_timeout=left)
            nodes = (response.get("nodes") or {}).values()
            return bool(nodes) and all(any(wanted(str(item.get("name", ""))) for item in node.get(kind) or [])
                                       for node in nodes)

        return await self._call(budget, run)

    async def scan(self, index: str, *, page: int = 500,
                   query: dict[str, Any] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Every document of `index` (id and _source) matching `query` (all by default), in pages, under one
        point-in-time-free scroll."""
        with engine_errors():
            async for hit in async_scan(self._client, index=index, size=page, scroll="5m",
                                        request_timeout=self._timeout_s,
                                        query={"query": query or {"match_all": {}}}):
                yield hit

    async def scan_fields(self, index: str, query: dict[str, Any], fields: list[str], *,
                          page: int = 1000) -> AsyncIterator[dict[str, Any]]:
        """The `_source` of every match of `query`, with only `fields`, under one scroll: listings longer than a
        search may return (the documents an ingest sync holds), without the chunks' text."""
        with engine_errors():
            async for hit in async_scan(self._client, index=index, size=page, scroll="5m",
                                        request_timeout=self._timeout_s, query={"query": query, "_source": fields}):
                yield hit.get("_source") or {}

    async def mapped_fields(self, index: str, fields: tuple[str, ...], budget: Budget) -> set[str]:
        """Fields mapped in EVERY index behind `index` (a field missing from one index is not enforceable there)."""

        async def run(left: float) -> set[str]:
            response = await self._client.indices.get_field_mapping(
                index=index, fields=",".join(fields), request_timeout=left
            )
            per_index = [set((body.get("mappings") or {}).keys()) for body in response.values()]
            return set.intersection(*per_index) if per_index else set()

        return await self._call(budget, run)

    async def metadata_types(self, index: str, budget: Budget) -> dict[str, str]:
        """Mapped type of every `metadata.*` field behind `index` (for translating metadata conditions)."""

        async def run(left: float) -> dict[str, str]:
            response = await self._client.indices.get_field_mapping(
                index=index, fields="metadata.*", request_timeout=left
            )
            types: dict[str, str] = {}
            for body in response.values():
                for full_name, spec in (body.get("mappings") or {}).items():
                    leaf = full_name.rsplit(".", 1)[-1]
                    kind = (spec.get("mapping") or {}).get(leaf, {}).get("type")
                    if isinstance(kind, str) and kind != "object":
                        types.setdefault(full_name.removeprefix("metadata."), kind)
            return types

        return await self._call(budget, run)

    async def existing_aliases(self, aliases: list[str], budget: Budget | None = None) -> set[str]:
        if not aliases:
            return set()

        async def run(left: float) -> set[str]:
            rows = await self._client.cat.aliases(name=",".join(aliases), format="json", request_timeout=left)
            return {row["alias"] for row in rows if row.get("alias") in aliases}

        return await self._call(budget, run)

    async def info(self, budget: Budget | None = None) -> dict[str, Any]:
        async def run(left: float) -> dict[str, Any]:
            response: dict[str, Any] = await self._client.info(request_timeout=left)
            return response

        return await self._call(budget, run)

    # --- index lifecycle (admin.py, ingest) ---

    async def alias_targets(self, alias: str) -> list[str]:
        """Concrete indices behind `alias`; empty if the alias does not exist."""
        async def run(left: float) -> list[str]:
            try:
                response = await self._client.indices.get_alias(name=alias, request_timeout=left)
            except NotFoundError:
                return []
            return sorted(response)

        return await self._call(None, run)

    async def index_exists(self, index: str) -> bool:
        async def run(left: float) -> bool:
            return bool(await self._client.indices.exists(index=index, request_timeout=left))

        return await self._call(None, run)

    async def create_index(self, index: str, body: dict[str, Any]) -> None:
        body = dialect.index_body(body, await self.flavor())
        async def run(left: float) -> None:
            await self._client.indices.create(index=index, body=body, request_timeout=left)

        await self._call(None, run, retry=False)

    async def put_mapping(self, index: str, properties: dict[str, Any]) -> None:
        properties = dialect.mapping_properties(properties, await self.flavor())
        async def run(left: float) -> None:
            await self._client.indices.put_mapping(index=index, body={"properties": properties}, request_timeout=left)

        await self._call(None, run, retry=False)

    async def delete_index(self, index: str) -> None:
        async def run(left: float) -> None:
            await self._client.indices.delete(index=index, request_timeout=left)

        await self._call(None, run, retry=False)

    async def update_aliases(self, actions: list[dict[str, Any]]) -> None:
        async def run(left: float) -> None:
            await self._client.indices.update_aliases(body={"actions": actions}, request_timeout=left)

        await self._call(None, run, retry=False)

    async def list_indices(self, pattern: str) -> dict[str, Any]:
        async def run(left: float) -> dict[str, Any]:
            try:
                response: dict[str, Any] = await self._client.indices.get(index=pattern, request_timeout=left)
            except NotFoundError:
                return {}
            return response

        return await self._call(None, run)

    async def append(self, rows: list[tuple[str, str, bytes]], index_body: dict[str, Any],
                     budget: Budget | None = None) -> list[tuple[int, int, str]]:
        """Create-only writes of serialised documents `(index, id, document)` in one `_bulk` through the search
        door; an index that does not exist yet is made with `index_body` and its rows sent again (nodes may refuse
        to create indices on write). Written twice (a retry after a lost answer), a row is a 409, not a second copy.
        Returns the rows not written: (position, status, error type)."""
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
            return await self._door.post("/_bulk", payload, "application/x-ndjson")

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

    async def refresh(self, index: str) -> None:
        async def run(left: float) -> None:
            await self._client.indices.refresh(index=index, request_timeout=left)

        await self._call(None, run)

    async def set_write_block(self, indices: list[str], blocked: bool) -> None:
        """Blocks (or allows again) writes to `indices`; searches go on. Waits for every node to apply it."""
        async def run(left: float) -> None:
            await self._client.indices.put_settings(index=",".join(indices), request_timeout=left,
                                                    body={"index.blocks.write": True if blocked else None})

        await self._call(None, run)

    async def write_count(self, indices: list[str]) -> int:
        """Index and delete operations ever applied to the primaries of `indices` (a copy is whole when this does
        not change while it runs)."""
        async def run(left: float) -> int:
            response = await self._client.indices.stats(index=",".join(indices), metric="indexing",
                                                        request_timeout=left)
            indexing = ((response.get("_all") or {}).get("primaries") or {}).get("indexing") or {}
            return int(indexing.get("index_total", 0)) + int(indexing.get("delete_total", 0))

        return await self._call(None, run)

    async def put_settings(self, index: str, settings: dict[str, Any]) -> None:
        async def run(left: float) -> None:
            await self._client.indices.put_settings(index=index, body=settings, request_timeout=left)

        await self._call(None, run)

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
            _check_by_query(response)
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
            _check_by_query(response)
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
        _check_by_query(outcome)
        await self.refresh(index)
        return {"updated": outcome["done"], "version_conflicts": outcome["version_conflicts"], "failures": []}

    async def _delete_each(self, index: str, query: dict[str, Any], *, refresh: bool) -> int:
        async def actions() -> AsyncIterator[dict[str, Any]]:
            async for hit in self._matches(index, query, source=False):
                yield {"_op_type": "delete", "_index": hit["_index"], "_id": hit["_id"],
                       "if_seq_no": hit["_seq_no"], "if_primary_term": hit["_primary_term"]}

        outcome = await self._bulk_outcomes(actions())
        _check_by_query(outcome)
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

    async def create_once(self, index: str, doc_id: str, document: dict[str, Any], budget: Budget,
                          index_body: dict[str, Any] | None = None) -> bool:
        """Writes `document` under `doc_id` unless that id exists: True when this call made it, False when it was
        there already. The engine decides (its version map, no refresh needed), so any number of processes agree.
        A missing index is created with `index_body` first. On the search door (a signed callback's hot path);
        not retried once sent: a lost answer to a create that happened would read as "there already"."""
        path = f"/{index}/_create/{doc_id}"  # ids here are hex digests, the index a configured name
        payload = orjson.dumps(document)

        async def run(left: float) -> bool:
            for attempt in range(2):  # the second only after making the missing index
                try:
                    await self._door.post(path, payload)
                    return True
                except TransportError as exc:
                    if exc.status_code == 409:
                        return False
                    if exc.status_code != 404 or index_body is None or attempt:
                        raise
                    await self._make_index(index, index_body, left)
            raise AssertionError("unreachable")  # pragma: no cover

        return await self._call(budget, run, retry=False)

    # --- documents by id (the principal store) ---

    async def get_documents(self, index: str, ids: list[str], budget: Budget | None = None) -> list[dict[str, Any]]:
        """The documents under `ids` that exist, each with `_id`, `_source`, `_seq_no` and `_primary_term`, read
        in real time (an `_mget`, no refresh needed). A missing index holds none. On the search door: a POST."""
        payload = orjson.dumps({"ids": ids})

        async def run(_: float) -> list[dict[str, Any]]:
            answer = await self._post_unless_missing(f"/{index}/_mget", payload)
            if answer is None:
                return []
            found = []
            for doc in answer.get("docs") or ():
                if doc.get("error") is not None and "index_not_found" not in str(doc["error"]):
                    raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"document read failed: {doc['error']}")
                if doc.get("found"):
                    found.append(doc)
            return found

        return await self._call(budget, run)

    async def _post_unless_missing(self, path: str, payload: bytes) -> dict[str, Any] | None:
        """The search door's answer, or None when the index does not exist (it holds no documents)."""
        try:
            return await self._door.post(path, payload)
        except TransportError as exc:
            if _index_missing(exc):
                return None
            raise

    async def put_document(self, index: str, doc_id: str, document: dict[str, Any], *, create: bool = False,
                           if_seq_no: int | None = None, if_primary_term: int | None = None,
                           index_body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Writes one document and refreshes (a search right after sees it); its `_seq_no`, `_primary_term` and
        `_version`. `create` refuses an existing id, `if_seq_no`/`if_primary_term` a changed one: both raise
        VersionConflict. A missing index is made with `index_body` first. Not retried once sent (a lost answer
        to a conditional write that happened would read as a conflict)."""
        params = _write_params(if_seq_no, if_primary_term)
        if create:
            params["op_type"] = "create"

        async def run(left: float) -> dict[str, Any]:
            for attempt in range(2):  # the second only after making the missing index
                try:
                    answer: dict[str, Any] = await self._client.index(
                        index=index, id=doc_id, body=document, params=params, request_timeout=left)
                    return answer
                except TransportError as exc:
                    if exc.status_code == 409:
                        raise VersionConflict(f"{doc_id} changed or exists") from None
                    if exc.status_code != 404 or index_body is None or attempt:
                        raise
                    await self._make_index(index, index_body, left)
            raise AssertionError("unreachable")  # pragma: no cover

        return await self._call(None, run, retry=False)

    async def delete_document(self, index: str, doc_id: str, *, if_seq_no: int | None = None,
                              if_primary_term: int | None = None) -> bool:
        """Deletes one document and refreshes: True when it was there. A changed one (if_seq_no) raises
        VersionConflict."""
        params = _write_params(if_seq_no, if_primary_term)

        async def run(left: float) -> bool:
            try:
                await self._client.delete(index=index, id=doc_id, params=params, request_timeout=left)
                return True
            except NotFoundError:
                return False
            except TransportError as exc:
                if exc.status_code == 409:
                    raise VersionConflict(f"{doc_id} changed") from None
                raise

        return await self._call(None, run, retry=False)

    async def search_documents(self, index: str, query: dict[str, Any], *, size: int = 10_000,
                               budget: Budget | None = None, source: list[str] | None = None) -> list[dict[str, Any]]:
        """Every hit of `query` (at most `size`, which must not pass the index's max_result_window: use `scan`
        for more), with `_id`, `_source`, `_seq_no` and `_primary_term`, in `_id` order; a missing index holds
        none. For the principal store's small, refreshed index."""
        body: dict[str, Any] = {"query": query, "size": size, "seq_no_primary_term": True}
        if source is not None:
            body["_source"] = source  # only these fields: a group's member list can be large
        payload = orjson.dumps(body)

        async def run(_: float) -> list[dict[str, Any]]:
            answer = await self._post_unless_missing(f"/{index}/_search", payload)
            if answer is None:
                return []
            _check_search(answer)
            hits: list[dict[str, Any]] = answer.get("hits", {}).get("hits", [])
            return sorted(hits, key=lambda hit: str(hit["_id"]))  # Elasticsearch 8+ does not sort on _id

        return await self._call(budget, run)

    async def _make_index(self, index: str, body: dict[str, Any], left: float) -> None:
        try:
            await self._client.indices.create(index=index, body=body, request_timeout=left)
        except RequestError as exc:
            if exc.error != "resource_already_exists_exception":  # another process made it first
                raise

    async def count(self, index: str, query: dict[str, Any] | None = None) -> int:
        async def run(left: float) -> int:
            body = {"query": query} if query else None
            response = await self._client.count(index=index, body=body, request_timeout=left)
            return int(response["count"])

        return await self._call(None, run)

    async def bulk(
        self,
        actions: AsyncIterable[dict[str, Any]] | Iterable[dict[str, Any]],
        *,
        chunk_size: int = 500,
        max_chunk_bytes: int = 5 * 1024 * 1024,
    ) -> AsyncIterator[tuple[bool, dict[str, Any]]]:
        """Streams per-action outcomes; failures are yielded (never raised away) so the caller can report them."""
        with engine_errors():
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
