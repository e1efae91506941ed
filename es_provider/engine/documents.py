"""Single documents by id through the Engine: create-once (a signed callback's replay guard), the principal
store's real-time reads, conditional writes and deletes (VersionConflict when the document changed), and its small
refreshed searches. Separate from the bulk and by-query writes, which handle many documents at a time.
"""

from __future__ import annotations

from typing import Any

import orjson
from opensearchpy.exceptions import NotFoundError, TransportError

from es_provider.core.deadline import Budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.errors import check_conflict, check_search, index_missing
from es_provider.engine.indices import IndexAdmin


def _write_params(if_seq_no: int | None, if_primary_term: int | None) -> dict[str, Any]:
    """A principal-store write: refreshed (a search right after sees it), conditional when a version is given."""
    params: dict[str, Any] = {"refresh": "true"}
    if if_seq_no is not None and if_primary_term is not None:
        params["if_seq_no"], params["if_primary_term"] = if_seq_no, if_primary_term
    return params


class Documents(IndexAdmin):
    """The Engine's (client.py) single-document operations, by id."""

    async def create_once(self, index: str, doc_id: str, document: dict[str, Any], budget: Budget,
                          index_body: dict[str, Any] | None = None) -> bool:
        """Writes `document` under `doc_id` unless that id exists: True when this call made it, False when it was
        there already. The engine decides (its version map, no refresh needed), so any number of processes agree.
        A missing index is created with `index_body` first. On the HTTP/1.1 client (a signed callback's hot path);
        not retried once sent: a lost answer to a create that happened would read as "there already"."""
        path = f"/{index}/_create/{doc_id}"  # ids here are hex digests, the index a configured name
        payload = orjson.dumps(document)
        if index_body is not None:
            await self._ensure_index(index, index_body, budget)

        async def run(left: float) -> bool:
            for attempt in range(2):  # the second only after making the missing index
                try:
                    await self._http1.post(path, payload)
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
        in real time (an `_mget`, no refresh needed). A missing index holds none. On the HTTP/1.1 client: a POST."""
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
        """The HTTP/1.1 client's answer, or None when the index does not exist (it holds no documents)."""
        try:
            return await self._http1.post(path, payload)
        except TransportError as exc:
            if index_missing(exc):
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
        if index_body is not None:
            await self._ensure_index(index, index_body, None)

        async def run(left: float) -> dict[str, Any]:
            for attempt in range(2):  # the second only after making the missing index
                try:
                    answer: dict[str, Any] = await self._client.index(
                        index=index, id=doc_id, body=document, params=params, request_timeout=left)
                    return answer
                except TransportError as exc:
                    check_conflict(exc, f"{doc_id} changed or exists")
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
                check_conflict(exc, f"{doc_id} changed")
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
            check_search(answer)
            hits: list[dict[str, Any]] = answer.get("hits", {}).get("hits", [])
            return sorted(hits, key=lambda hit: str(hit["_id"]))  # Elasticsearch 8+ does not sort on _id

        return await self._call(budget, run)
