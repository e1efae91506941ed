"""Ingest that mirrors its source (`ingest --sync`, docs/ingest.md): once a run has written every document its
source holds, the documents of its scope that the source no longer holds are deleted.

- A scope is (knowledge base, tenant or none, source label). Every query here, the deletes included, selects
  chunks by all three, so a document id that another tenant or another source also uses is never touched.
- Nothing is deleted unless the run had no failure at all: an unreadable file, a refused document or a chunk not
  written may be a document the source still holds. An exception or a kill stops the run before this step.
- A run that read no document deletes nothing: an empty or unmounted folder looks the same as a source emptied
  on purpose, and would take the whole scope with it.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from es_provider.engine.client import Engine
from es_provider.engine.write_block import wait_out_block
from es_provider.ingest.ownership import LABEL_FIELD, LOOKUP_BATCH, refusals
from es_provider.ingest.records import RecordError, SourceDocument
from es_provider.ingest.sources import OptionError
from es_provider.ingest.writer import first_occurrences

LABEL_LIMIT = 128  # as a tenant id: a keyword an operator types and reads back in messages


def check_label(label: str) -> str:
    """A `--source` label as given, or OptionError: 1–128 characters, no control characters, not only blanks."""
    if not label.strip():
        raise OptionError("--source: a label is required (e.g. --source wiki)")
    if len(label) > LABEL_LIMIT:
        raise OptionError(f"--source: at most {LABEL_LIMIT} characters")
    if not label.isprintable():
        raise OptionError("--source: no control characters (tabs, newlines)")
    return label


@dataclass(frozen=True, slots=True)
class Scope:
    """What one sync mirrors: the chunks of `tenant` (None: those with no tenant) that source `label` wrote."""

    label: str
    tenant: str | None = None

    def describe(self) -> str:
        return f"source {self.label}, " + (f"tenant {self.tenant}" if self.tenant else "no tenant")

    def query(self, document_ids: Sequence[str] | None = None) -> dict[str, Any]:
        """Pure: the scope's chunks (of these documents only, when given) as a bool query."""
        held: list[dict[str, Any]] = [{"term": {LABEL_FIELD: self.label}}]
        if self.tenant is not None:
            held.append({"term": {"tenant_id": self.tenant}})
        if document_ids is not None:
            held.append({"terms": {"document_id": list(document_ids)}})
        without_tenant = [{"exists": {"field": "tenant_id"}}] if self.tenant is None else []
        return {"bool": {"filter": held, "must_not": without_tenant}}


def options(source: str | None, *, tenant: str | None, sync: bool, dry_run: bool) -> tuple[str | None, Scope | None]:
    """The command line's `--source`, `--tenant`, `--sync` and `--dry-run` → (the label to record, the scope to
    mirror); OptionError when they do not go together. A sync without a label is refused rather than given one
    derived from its paths: the same folder reached by another path would be another source, and its documents
    would never be removed."""
    if sync and source is None:
        raise OptionError("--sync needs --source LABEL: the source whose documents this run mirrors "
                          "(docs/ingest.md)")
    if dry_run and not sync:
        raise OptionError("--dry-run lists what --sync would remove: give it with --sync")
    if source is None:
        return None, None
    label = check_label(source)
    return label, Scope(label, tenant or None) if sync else None


def _tenant(doc: SourceDocument) -> str | None:
    return doc.record.tenant_id or None  # "" writes no tenant_id, as None does (writer.py)


def in_scope(items: Sequence[SourceDocument | RecordError], scope: Scope) -> list[SourceDocument | RecordError]:
    """Pure: the run's documents, each one of another tenant than the scope's (a JSON Lines record carries its own)
    replaced by a failure: written, it would sit where no sync of this scope could remove it."""
    kept: list[SourceDocument | RecordError] = []
    for item in items:
        if isinstance(item, SourceDocument) and _tenant(item) != scope.tenant:
            tenant = _tenant(item)
            kept.append(RecordError(item.origin or item.record.document_id,
                                    f"document {item.record.document_id}: "
                                    + (f"tenant {tenant}" if tenant else "no tenant")
                                    + f" is outside this sync ({scope.describe()}); not written (a sync mirrors one "
                                    "tenant: sync the others in runs of their own, with --tenant)"))
        else:
            kept.append(item)
    return kept


def read_ids(items: Sequence[SourceDocument | RecordError]) -> set[str]:
    """Pure: the document ids the source holds, as read by this run."""
    return {item.record.document_id for item in items if isinstance(item, SourceDocument)}


def to_remove(held: Mapping[str, int], kept: Collection[str]) -> dict[str, int]:
    """Pure: the scope's documents (id → chunks) that the source no longer holds, in id order."""
    return {doc_id: held[doc_id] for doc_id in sorted(held) if doc_id not in kept}


def shown(document_id: str) -> str:
    """A document id on a line of its own: as it is, or JSON-quoted when it holds a line break or another control
    character (a JSON Lines record's id may), so that one line is always one id."""
    return document_id if document_id.isprintable() else json.dumps(document_id, ensure_ascii=False)


async def held_in_scope(engine: Engine, index: str, scope: Scope) -> dict[str, int]:
    """The scope's documents in the index → their chunks (a scroll: a scope may hold more than a search returns)."""
    counts: Counter[str] = Counter()
    async for source in engine.scan_fields(index, scope.query(), ["document_id"]):
        counts[str(source.get("document_id"))] += 1
    return dict(counts)


async def remove(engine: Engine, index: str, scope: Scope, document_ids: Sequence[str], *,
                 block_wait_s: float) -> int:
    """Deletes the chunks of these documents that are in the scope (never another tenant's or source's with the
    same id); returns the chunks deleted. On Elasticsearch without `_delete_by_query` the engine deletes through
    a scroll and bulk deletes (engine/by_query.py); a reindex's write block is waited out, as for every writer."""
    deleted = 0
    for start in range(0, len(document_ids), LOOKUP_BATCH):
        query = scope.query(document_ids[start : start + LOOKUP_BATCH])
        deleted += await wait_out_block(functools.partial(engine.delete_by_query, index, query, refresh=False),
                                        block_wait_s, engine=engine, alias=index)
    await engine.refresh(index)
    return deleted


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


@dataclass(frozen=True, slots=True)
class Removal:
    """What a sync removed, or would remove (a dry run), or why it removed nothing."""

    scope: Scope
    stale: dict[str, int] = field(default_factory=dict)  # documents not in the source → their chunks
    dry_run: bool = False
    withheld: str | None = None  # why nothing was (or would be) removed
    refused: bool = False  # withheld for a reason that is itself a failure (exit 1)
    deleted: int = 0  # chunks deleted

    def removed_lines(self) -> list[str]:
        """`removed: <id>` for each document this sync removed (none when it withheld, or is a dry run)."""
        return [] if self.dry_run or self.withheld is not None else [f"removed: {shown(d)}" for d in self.stale]

    def line(self) -> str:
        """The summary line's sync part."""
        head = f"{'dry run' if self.dry_run else 'sync'} ({self.scope.describe()})"
        found = f"{_count(len(self.stale), 'document')} ({_count(sum(self.stale.values()), 'chunk')})"
        if self.withheld is not None:
            verb = "would be removed" if self.dry_run else "removed"
            return f"{head}: nothing {verb}: {self.withheld} ({found} of the scope not in the source)"
        if self.dry_run:
            return f"{head}: {found} would be removed; nothing written"
        removed = f"{_count(len(self.stale), 'document')} no longer in the source removed"
        return f"{head}: {removed} ({_count(self.deleted, 'chunk')})"


async def preview_failures(engine: Engine, index: str, items: Sequence[SourceDocument | RecordError],
                           label: str) -> list[str]:
    """The failures a run of these documents would have before writing (unreadable, repeated and refused
    documents), for a dry run; only a chunk the engine rejects cannot be foreseen."""
    failures = [str(item) for item in items if isinstance(item, RecordError)]
    by_id, repeated = first_occurrences([item for item in items if isinstance(item, SourceDocument)])
    failures += repeated
    if by_id and await engine.count(index) > 0:
        failures += (await refusals(engine, index, by_id, label)).values()
    return failures


async def mirror(engine: Engine, index: str, scope: Scope, read: Collection[str], failures: int, *,
                 dry_run: bool = False, block_wait_s: float = 600.0) -> Removal:
    """After a run: deletes the scope's documents that are not among `read` (the ids the source holds) — unless
    the run had failures, read nothing, or is a dry run (then only lists them)."""
    stale = to_remove(await held_in_scope(engine, index, scope), read)
    if failures:
        noun = "failure" if failures == 1 else "failures"
        return Removal(scope, stale, dry_run, withheld=f"the run {'would have' if dry_run else 'had'} {failures} "
                       f"{noun}, and a document it could not read or write may still be in the source")
    if stale and not read:
        return Removal(scope, stale, dry_run, refused=True,
                       withheld="no document was read from the source (an empty or unmounted folder looks the same); "
                       "remove them with `es-provider delete` if the source is empty on purpose")
    if dry_run or not stale:
        return Removal(scope, stale, dry_run)
    deleted = await remove(engine, index, scope, list(stale), block_wait_s=block_wait_s)
    return Removal(scope, stale, deleted=deleted)


@dataclass(frozen=True, slots=True)
class DryRun:
    failures: list[str]  # those the run would have before writing
    removal: Removal

    def lines(self) -> list[str]:
        """What a dry run prints: the ids it would remove, one per line (for a script), then the count."""
        return [*map(shown, self.removal.stale), self.removal.line()]


async def dry_run(engine: Engine, index: str, items: Sequence[SourceDocument | RecordError], scope: Scope) -> DryRun:
    """`ingest --sync --dry-run`: writes nothing; the failures the run would have, and what it would remove."""
    failures = await preview_failures(engine, index, items, scope.label)
    return DryRun(failures, await mirror(engine, index, scope, read_ids(items), len(failures), dry_run=True))
