"""One `es-provider ingest` run, from its paths to its summary line: the options checked and the paths read
(plan), then the documents written under a progress bar on a terminal, a sync's removals, the failures one per
line and the summary; a sync's dry run only lists (run). Separate from the writer, which writes what it is given
and returns a Summary, and from the command line, which only parses the arguments and turns the outcome into an
exit code."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.settings import Settings
from es_provider.engine.client import Engine
from es_provider.ingest import admin, sync
from es_provider.ingest.records import RecordError, SourceDocument
from es_provider.ingest.sources import FileDefaults, Skipped, check_defaults, collect, skipped_line
from es_provider.ingest.writer import ingest
from es_provider.search import embedders


@dataclass(frozen=True)
class Plan:
    """A run with its options checked and its paths read, before any engine call."""

    documents: list[SourceDocument | RecordError]  # those in the sync's scope, when it has one
    skipped: list[Skipped]  # left out by rule (links, hidden, special files): not failures
    label: str | None  # the source label every chunk records
    scope: sync.Scope | None  # what a sync mirrors (None: no sync)
    dry_run: bool
    body: dict[str, Any]  # the index's body from the mappings
    refresh_interval: str  # restored after a large load


def plan(settings: Settings, kb: KnowledgeBase, paths: list[str], defaults: FileDefaults, *, source: str | None,
         mirror: bool, dry_run: bool, mappings: Path) -> Plan:
    """The options (`--source`, `--sync`, `--dry-run` and what every file gets) checked, OptionError naming the
    one at fault, before any path is read; then the paths read."""
    check_defaults(defaults)
    label, scope = sync.options(source, tenant=defaults.tenant_id, sync=mirror, dry_run=dry_run)
    collected = collect(paths, defaults)
    documents = collected.items if scope is None else sync.in_scope(collected.items, scope)
    body = admin.index_body(settings, kb, mappings)
    interval = str(body.get("settings", {}).get("index", {}).get("refresh_interval", "1s"))
    return Plan(documents, collected.skipped, label, scope, dry_run, body, interval)


async def run(engine: Engine, settings: Settings, kb: KnowledgeBase, planned: Plan, *, chunk_size: int,
              overlap: int, concurrency: int, environ: Mapping[str, str]) -> bool:
    """Runs the plan and says what it did: each failure on stderr (`failed: ...`); on stdout a dry run's ids and
    count, else the ids a sync removed and the summary line. True when nothing failed and a sync refused nothing."""
    documents, scope = planned.documents, planned.scope
    if scope is not None and planned.dry_run:
        preview = await sync.dry_run(engine, kb.alias, documents, scope)
        sys.stderr.write("".join(f"failed: {failure}\n" for failure in preview.failures))
        print(*preview.lines(), sep="\n")  # the ids one per line, for a script; then the count
        return not (preview.failures or preview.removal.refused)
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(documents), unit="doc", file=sys.stderr, dynamic_ncols=True)
    chunks = 0

    def progress(docs: int, new_chunks: int) -> None:
        nonlocal chunks
        chunks += new_chunks
        if bar is not None:
            bar.update(docs)
            bar.set_postfix(chunks=chunks, refresh=False)

    # An index made by an older release lacks fields the writer now fills (its mapping is strict).
    await admin.add_new_fields(engine, kb, planned.body)
    try:
        async with embedders.opened(settings, kb, environ) as embedder:
            summary = await ingest(engine, kb, documents, chunk_size=chunk_size, overlap=overlap,
                                   concurrency=concurrency, refresh_interval=planned.refresh_interval,
                                   progress=progress, embedder=embedder,
                                   block_wait_s=settings.opensearch.write_block_wait_s, source_label=planned.label)
    except BaseException:
        if scope is not None:  # an interrupted sync never got to its deletes: say so next to the error
            print("sync: nothing removed (the run did not finish)", file=sys.stderr)
        raise
    finally:
        if bar is not None:
            bar.close()
    for failure in summary.failures:
        print(f"failed: {failure}", file=sys.stderr)
    removal = None if scope is None else await sync.mirror(
        engine, kb.alias, scope, sync.read_ids(documents), len(summary.failures),
        block_wait_s=settings.opensearch.write_block_wait_s)
    skipped = skipped_line(planned.skipped)  # left out by rule (links, hidden, special files): not failures
    line = summary.line() + (f"; {removal.line()}" if removal else "") + (f"; {skipped}" if skipped else "")
    print(*(removal.removed_lines() if removal else ()), line, sep="\n")  # what was removed, by id
    return not (summary.failures or (removal and removal.refused))
