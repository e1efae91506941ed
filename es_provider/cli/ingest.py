"""`es-provider ingest`: its options, parsed into what ingest/run.py takes; the run itself (sources read, the
progress bar, sync, the failures and the summary) is there, and this only turns its outcome into an exit code."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from es_provider.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    fail,
    find_kb,
    names,
    read_only_refusal,
    with_config,
    with_engine,
)
from es_provider.config.settings import Settings
from es_provider.engine.client import Engine
from es_provider.ingest import admin
from es_provider.ingest.chunker import DEFAULT_OVERLAP, DEFAULT_SIZE


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.ingest.run import plan, run
    from es_provider.ingest.sources import FileDefaults, OptionError

    kb = find_kb(settings, args.kb)
    if (why := read_only_refusal(kb, "ingest")) is not None:
        return fail(why)
    metadata: dict[str, Any] = {}
    for pair in args.metadata:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            return fail(f"--metadata expects KEY=VALUE, got {pair!r}", EXIT_USAGE)
        metadata[name] = value
    defaults = FileDefaults(tenant_id=args.tenant, subjects=tuple(args.subjects), groups=tuple(args.groups),
                            public=args.public, metadata=metadata)
    try:
        planned = plan(settings, kb, args.paths, defaults, source=args.source, mirror=args.sync,
                       dry_run=args.dry_run, mappings=Path(args.mappings))
    except OptionError as exc:
        return fail(str(exc), EXIT_USAGE)

    async def work(engine: Engine) -> int:
        clean = await run(engine, settings, kb, planned, chunk_size=args.chunk_size, overlap=args.overlap,
                          concurrency=args.concurrency, environ=os.environ)
        return 0 if clean else EXIT_FAILED

    return asyncio.run(with_engine(settings, work, writes="ingest"))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ingest = with_config(sub.add_parser("ingest", help="index documents"))
    ingest.add_argument("--kb", required=True)
    ingest.add_argument("--chunk-size", type=int, default=DEFAULT_SIZE, help="characters per chunk (max 16384)")
    ingest.add_argument("--overlap", type=int, default=DEFAULT_OVERLAP, help="characters carried into the next chunk")
    ingest.add_argument("--concurrency", type=int, default=4, help="bulk requests in flight")
    ingest.add_argument("--tenant", default=None,
                        help="files: tenant id (none: application-shared); with --sync, the tenant mirrored")
    ingest.add_argument("--subjects", type=names, action="extend", default=[],
                        help="files: subjects that may read them (comma-separated)")
    ingest.add_argument("--groups", type=names, action="extend", default=[],
                        help="files: groups that may read them (comma-separated)")
    ingest.add_argument("--public", action="store_true", help="files: readable by every subject of the tenant")
    ingest.add_argument("--metadata", action="append", default=[], help="files: KEY=VALUE metadata (repeatable)")
    ingest.add_argument("--mappings", default=str(admin.DEFAULT_MAPPINGS))
    ingest.add_argument("--source", default=None, metavar="LABEL",
                        help="record this source label on every chunk written (docs/ingest.md)")
    ingest.add_argument("--sync", action="store_true",
                        help="mirror the source: then remove its documents (of --tenant) that PATHs no longer hold")
    ingest.add_argument("--dry-run", action="store_true", help="with --sync: write nothing, list what would go")
    ingest.add_argument("paths", nargs="+")
    ingest.set_defaults(run=cmd_ingest)
