"""The engine queries of the workbench's "why not?" (explain.py judges what they find): the stored chunks a clause
selects, and which of them match a clause at all. An operator view: no permission filter here, explain.py applies
acl.py's predicates to the chunks."""

from __future__ import annotations

from typing import Any

from es_provider.core.deadline import Budget
from es_provider.core.schema import OWN, Schema
from es_provider.engine.client import Engine
from es_provider.search.query import source_fields


async def stored_chunks(engine: Engine, alias: str, which: dict[str, Any], limit: int, budget: Budget, *,
                        schema: Schema = OWN) -> list[dict[str, Any]]:
    """The stored chunks (`_id`, `_source`) that `which` selects, unranked."""
    found = await engine.search(alias, {"size": limit, "_source": source_fields(schema),
                                         "query": {"bool": {"filter": [which]}}}, budget)
    hits: list[dict[str, Any]] = found.get("hits", {}).get("hits", [])
    return hits


async def matching(engine: Engine, alias: str, ids: list[str], clause: dict[str, Any], budget: Budget) -> set[str]:
    """Which of the chunks `ids` match `clause` at all."""
    body = {"size": len(ids), "_source": False,
            "query": {"bool": {"filter": [{"ids": {"values": ids}}], "must": [clause]}}}
    found = await engine.search(alias, body, budget)
    return {str(hit.get("_id")) for hit in found.get("hits", {}).get("hits", [])}
