"""Index lifecycle: versioned indices `<alias>-v<N>` built from mappings/, behind the knowledge base's alias."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.settings import Settings
from es_provider.core.naming import index_name, index_pattern, version_of
from es_provider.engine.client import Engine
from es_provider.engine.write_block import wait_out_block
from es_provider.ingest.writer import EMBED_BATCH, add_vectors
from es_provider.search.embedders import Embedder
from es_provider.search.query import LANGUAGE_FIELDS, VECTOR_FIELD

DEFAULT_MAPPINGS = Path(os.environ.get("ES_PROVIDER_MAPPINGS", Path(__file__).resolve().parents[2] / "mappings"))


class AdminError(Exception):
    """An index operation that cannot proceed; the message says why."""


def _load(path: Path) -> dict[str, Any]:
    try:
        body: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AdminError(f"cannot load {path}: {exc}") from None
    return body


def for_languages(body: dict[str, Any], languages: Sequence[str]) -> dict[str, Any]:
    """Pure: `body` without the analysed fields of languages the knowledge base does not have. A parent field
    that is not needed any more stays in the mapping unindexed (its sub-fields hang from it)."""
    unused = {f for language, fields in LANGUAGE_FIELDS.items() if language not in languages for f in fields}
    properties = body.get("mappings", {}).get("properties", {})
    for name in unused:
        parent, _, sub = name.partition(".")
        if parent not in properties:
            continue
        if sub:
            properties[parent].get("fields", {}).pop(sub, None)
        else:
            properties[parent]["index"] = False
    return body


def load_index_body(
    mappings_dir: Path = DEFAULT_MAPPINGS, *, replicas: int | None = None, dimensions: int | None = None,
    languages: Sequence[str] = ("en", "zh"),
) -> dict[str, Any]:
    """chunks.json for `languages`, plus (with `dimensions`) the k-NN setting and vector field of vector.json."""
    body = for_languages(_load(mappings_dir / "chunks.json"), languages)
    index_settings = body.setdefault("settings", {}).setdefault("index", {})
    if replicas is not None:
        index_settings["number_of_replicas"] = replicas
    if dimensions is not None:
        vector = _load(mappings_dir / "vector.json")
        index_settings.update(vector.get("settings", {}).get("index", {}))
        field = dict(vector["mappings"]["properties"][VECTOR_FIELD], dimension=dimensions)
        body.setdefault("mappings", {}).setdefault("properties", {})[VECTOR_FIELD] = field
    return body


def index_body(
    settings: Settings, kb: KnowledgeBase, mappings_dir: Path = DEFAULT_MAPPINGS, *, replicas: int | None = None
) -> dict[str, Any]:
    """The index body for a knowledge base: with a vector field when it has an embedder."""
    dimensions = settings.embedders[kb.embedder].dimensions if kb.embedder is not None else None
    return load_index_body(mappings_dir, replicas=replicas, dimensions=dimensions, languages=kb.languages)


# Fields added to mappings/chunks.json since the first release; an older index gets them before an ingest writes them.
ADDED_FIELDS = ("context",)


async def add_new_fields(engine: Engine, kb: KnowledgeBase, body: dict[str, Any]) -> None:
    """Adds ADDED_FIELDS (as `body` maps them) to the knowledge base's current index; adding a field is allowed on a
    live index and a no-op when it is there."""
    properties = body.get("mappings", {}).get("properties", {})
    await engine.put_mapping(kb.alias, {name: properties[name] for name in ADDED_FIELDS if name in properties})


async def versions(engine: Engine, kb: KnowledgeBase) -> list[int]:
    indices = await engine.list_indices(index_pattern(kb.alias))
    found = (version_of(name, kb.alias) for name in indices)
    return sorted(v for v in found if v is not None)


async def create(engine: Engine, kb: KnowledgeBase, body: dict[str, Any], *, exist_ok: bool = False) -> str:
    """Creates `<alias>-v<N+1>` and points the alias at it; returns the index name."""
    current = await engine.alias_targets(kb.alias)
    if current:
        if exist_ok:
            return current[0]
        raise AdminError(f"knowledge base {kb.id} already exists (alias {kb.alias} → {', '.join(current)})")
    if await engine.index_exists(kb.alias):
        raise AdminError(f"an index named {kb.alias} exists where the alias should be")
    existing = await versions(engine, kb)
    index = index_name(kb.alias, (existing[-1] if existing else 0) + 1)
    await engine.create_index(index, body)
    await engine.update_aliases([{"add": {"index": index, "alias": kb.alias, "is_write_index": True}}])
    return index


async def drop(engine: Engine, kb: KnowledgeBase) -> list[str]:
    """Deletes the alias and every version of the knowledge base's index."""
    indices = [index_name(kb.alias, v) for v in await versions(engine, kb)]
    for index in indices:
        await engine.delete_index(index)
    return indices


async def describe(engine: Engine, kb: KnowledgeBase) -> dict[str, Any]:
    return {
        "id": kb.id,
        "alias": kb.alias,
        "indices": [index_name(kb.alias, v) for v in await versions(engine, kb)],
        "active": await engine.alias_targets(kb.alias),
    }


# Grant adds, revoke removes; `public` (when given) sets the flag. Chunks with a single-string field are mended.
_ACL_SCRIPT = """
if (ctx._source.acl == null) { ctx._source.acl = new HashMap(); }
def acl = ctx._source.acl;
for (def name : ['subjects', 'groups']) {
  def current = acl[name];
  if (current == null) { acl[name] = new ArrayList(); }
  else if (!(current instanceof List)) { def list = new ArrayList(); list.add(current); acl[name] = list; }
}
for (def name : ['subjects', 'groups']) {
  def list = acl[name];
  for (def v : params[name]) {
    if (params.grant) { if (!list.contains(v)) { list.add(v); } } else { list.removeIf(x -> x == v); }
  }
}
if (params.public != null) { acl.public = params.public; }
if (acl.public == null) { acl.public = false; }
"""


def changed_acl(acl: object, *, grant: bool, subjects: list[str], groups: list[str],
                public: bool | None) -> dict[str, Any]:
    """Pure: _ACL_SCRIPT in Python, for engines without scripted by-query updates (engine/by_query.py's core-API path).
    The integration tests run both on one index and compare."""
    out: dict[str, Any] = dict(acl) if isinstance(acl, dict) else {}
    for name, values in (("subjects", subjects), ("groups", groups)):
        current = out.get(name)
        listed = [] if current is None else list(current) if isinstance(current, list) else [current]
        for value in values:
            if grant and value not in listed:
                listed.append(value)
            elif not grant:
                listed = [x for x in listed if x != value]
        out[name] = listed
    if public is not None:
        out["public"] = public
    if out.get("public") is None:
        out["public"] = False
    return out


async def set_acl(
    engine: Engine,
    kb: KnowledgeBase,
    document_id: str,
    *,
    grant: bool,
    subjects: list[str],
    groups: list[str],
    public: bool | None,
    block_wait_s: float = 600.0,
) -> int:
    """Changes the ACL of every chunk of a document; returns only once the change is searchable. The script is
    idempotent (grant adds if missing, revoke removes), so a retry after a block or a conflict converges."""
    script = {
        "source": _ACL_SCRIPT,
        "lang": "painless",
        "params": {"grant": grant, "subjects": subjects, "groups": groups, "public": public},
    }
    query = {"term": {"document_id": document_id}}

    def change(source: dict[str, Any]) -> dict[str, Any]:
        return {"acl": changed_acl(source.get("acl"), grant=grant, subjects=subjects, groups=groups, public=public)}

    for _ in range(5):
        response = await wait_out_block(lambda: engine.update_by_query(kb.alias, query, script, change), block_wait_s,
                                        engine=engine, alias=kb.alias)
        if not response.get("version_conflicts"):
            return int(response.get("updated", 0))
    raise AdminError(f"document {document_id}: chunks kept changing under the ACL update; try again")


async def delete_document(engine: Engine, kb: KnowledgeBase, document_id: str, *, block_wait_s: float = 600.0) -> int:
    return await wait_out_block(
        lambda: engine.delete_by_query(kb.alias, {"term": {"document_id": document_id}}, refresh=True), block_wait_s,
        engine=engine, alias=kb.alias)


async def _copy_with_vectors(engine: Engine, source: str, dest: str, embedder: Embedder) -> int:
    """Copies every chunk into `dest`, (re)computing its vector: how an existing knowledge base gains embeddings."""

    async def embedded(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
        chunks = [dict(hit.get("_source") or {}) for hit in hits]
        await add_vectors(chunks, embedder)
        return [{"_op_type": "index", "_index": dest, "_id": str(hit["_id"]), "_source": chunk}
                for hit, chunk in zip(hits, chunks, strict=True)]

    async def actions() -> AsyncIterator[dict[str, Any]]:
        pending: list[dict[str, Any]] = []
        async for hit in engine.scan(source):
            pending.append(hit)
            if len(pending) >= EMBED_BATCH:
                for action in await embedded(pending):
                    yield action
                pending = []
        for action in await embedded(pending) if pending else []:
            yield action

    failed = 0
    async for ok, _ in engine.bulk(actions()):
        failed += not ok
    await engine.refresh(dest)
    return failed


async def reindex(
    engine: Engine,
    kb: KnowledgeBase,
    body: dict[str, Any],
    *,
    delete_old: bool = False,
    embedder: Embedder | None = None,
) -> str:
    """Builds `<alias>-v<N+1>` from the current index, then moves the alias to it in one atomic action.

    With an embedder, every chunk is embedded on the way (cached by content hash), so an existing knowledge base
    gains or refreshes its vectors. Queries keep running throughout: until the swap they read the old index,
    after it the new one. The old index is kept unless `delete_old` (then it is deleted after the swap)."""
    current = await engine.alias_targets(kb.alias)
    if not current:
        raise AdminError(f"knowledge base {kb.id} does not exist (no alias {kb.alias})")
    existing = await versions(engine, kb)
    newest = max(version_of(old, kb.alias) or 0 for old in current)
    for leftover in (v for v in existing if v > newest):
        # A reindex killed half-way left a partial copy behind no alias: this run builds it again.
        await engine.delete_index(index_name(kb.alias, leftover))
    index = index_name(kb.alias, newest + 1)
    # Writes to the old index are blocked while it is copied: every writer (ingest, acl, delete) waits and retries
    # through the alias, so a write made during the copy lands in the new index, and none is undone by the swap.
    await engine.set_write_block(current, True)
    try:
        await _copy_whole(engine, kb, current, index, body=body, embedder=embedder)
        actions: list[dict[str, Any]] = [{"remove": {"index": old, "alias": kb.alias}} for old in current]
        actions.append({"add": {"index": index, "alias": kb.alias, "is_write_index": True}})
        await engine.update_aliases(actions)
    finally:
        await engine.set_write_block(current, False)
    if delete_old:
        for old in current:
            await engine.delete_index(old)
    return index


async def _copy_whole(engine: Engine, kb: KnowledgeBase, current: list[str], index: str, *, body: dict[str, Any],
                      embedder: Embedder | None, attempts: int = 3) -> None:
    """Copies the (write-blocked) current index into `index`, again if any write slipped in while it ran (one
    already past the block's check when the block was set), so the copy holds every acknowledged write."""
    for _ in range(attempts):
        # Counted first, then refreshed: a write applied in between is counted as a change (copy again), never
        # counted yet left out of the copy's snapshot for want of a refresh.
        before = await engine.write_count(current)
        await engine.refresh(kb.alias)  # every acknowledged write is visible to the copy's snapshot
        await engine.create_index(index, body)
        try:
            if embedder is not None:
                failed = await _copy_with_vectors(engine, kb.alias, index, embedder)
                if failed:
                    raise AdminError(f"reindex into {index}: {failed} chunk(s) could not be written")
            else:
                result = await engine.reindex(kb.alias, index)
                if result.get("failures"):
                    raise AdminError(f"reindex into {index} reported {len(result['failures'])} failure(s)")
        except BaseException:
            await engine.delete_index(index)
            raise
        if await engine.write_count(current) == before:
            return
        await engine.delete_index(index)
    raise AdminError(f"writes kept reaching {', '.join(current)} despite its write block; nothing was swapped")
