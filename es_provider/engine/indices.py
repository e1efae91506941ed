"""Index administration through the Engine: indices made, changed and dropped (with the dialect's translation of
bodies and mappings), aliases read and swapped, settings and write blocks, refreshes and write counts — what
ingest/admin.py and a reindex ask of the engine. Separate from the document operations, which only write into the
indices these make.
"""

from __future__ import annotations

from typing import Any

from opensearchpy.exceptions import NotFoundError, RequestError

from es_provider.core.deadline import Budget
from es_provider.engine import dialect
from es_provider.engine.base import EngineBase


class IndexAdmin(EngineBase):
    """The Engine's (client.py) index administration: indices, aliases, settings, blocks and refreshes."""

    async def alias_targets(self, alias: str) -> list[str]:
        """Concrete indices behind `alias`; empty if the alias does not exist."""
        async def run(left: float) -> list[str]:
            try:
                # Named as the index expression too (GET /alias/_alias/alias): a security plugin then checks the
                # privilege on the alias, not on every index as `GET /_alias/alias` asks.
                response = await self._client.indices.get_alias(index=alias, name=alias, request_timeout=left)
            except NotFoundError:
                return []
            return sorted(index for index, entry in response.items() if alias in (entry.get("aliases") or {}))

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

    async def ensure_index(self, index: str, body: dict[str, Any], budget: Budget | None = None) -> bool:
        """Makes one of the service's own indices (replays, principal store, an access day) with `body` unless it
        exists: True when this call made it. Made ahead of its first write (`es-provider prepare`, the serving
        process's next access day, `_ensure_index`), so a node's auto-creation never gives it dynamic mappings and
        a user without the right to create indices finds it there. Retried: a second create finds it made."""
        async def run(left: float) -> bool:
            if await self._client.indices.exists(index=index, request_timeout=left):
                return False
            return await self._make_index(index, body, left)

        made = await self._call(budget, run)
        self._ensured.add(index)
        return made

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

    async def existing_aliases(self, aliases: list[str], budget: Budget | None = None) -> set[str]:
        if not aliases:
            return set()

        async def run(left: float) -> set[str]:
            # The aliases named as the index expression too (as alias_targets): `_cat/aliases` asks for the
            # aliases of every index, which a role granting only the knowledge bases' patterns is refused.
            try:
                response = await self._client.indices.get_alias(
                    index=",".join(aliases), ignore_unavailable=True, request_timeout=left)
            except NotFoundError:
                return set()
            # An existing index may be named as it is, without an alias (docs/existing-index.md).
            return {name for index, entry in response.items() for name in (index, *(entry.get("aliases") or {}))
                    if name in aliases}

        return await self._call(budget, run)

    async def mappings(self, index: str) -> dict[str, dict[str, Any]]:
        """Each index behind `index` → its mapping's properties."""
        async def run(left: float) -> dict[str, dict[str, Any]]:
            response = await self._client.indices.get_mapping(index=index, request_timeout=left)
            return {name: dict((body.get("mappings") or {}).get("properties") or {})
                    for name, body in response.items()}

        return await self._call(None, run)

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

    async def _make_index(self, index: str, body: dict[str, Any], left: float) -> bool:
        """True when this call made it; False when another process made it first."""
        try:
            await self._client.indices.create(index=index, body=body, request_timeout=left)
        except RequestError as exc:
            if exc.error != "resource_already_exists_exception":
                raise
            return False
        return True

    async def _ensure_index(self, index: str, body: dict[str, Any], budget: Budget | None) -> None:
        """Makes one of the service's own indices with `body` before this process first writes to it, unless it
        exists. Writing first would leave it to a cluster that creates indices on write (action.auto_create_index,
        both engines' default) to make it with dynamic mappings: keywords become text and the term lookups on it
        find nothing. Once per index and process; an index deleted after that is made again only where the engine
        refuses to create it on write (the writers' 404 path)."""
        if index not in self._ensured:
            await self.ensure_index(index, body, budget)
