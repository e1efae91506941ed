"""`es-provider access`: who was served what, as JSON Lines, newest first (docs/access.md); audit/ reads the
records, from the engine's daily indices or the daily files."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import orjson

from es_provider.cli.common import EXIT_USAGE, fail, with_config
from es_provider.config.settings import Settings
from es_provider.engine.client import connect


def cmd_access(args: argparse.Namespace, settings: Settings) -> int:
    """Access records as JSON Lines, newest first: from the engine's daily indices, else the daily files."""
    from es_provider.audit import access, recorder

    config = settings.access_log
    try:
        since = access.parse_since(args.since, dt.datetime.now(dt.UTC)) if args.since else None
    except ValueError:
        return fail("--since: a duration such as 7d, 12h or 30m, or an ISO 8601 time", EXIT_USAGE)
    wanted = access.Wanted(document=args.document, subject=args.subject, knowledge=args.kb, since=since,
                           limit=args.limit)
    found: list[dict[str, Any]] = []
    if "index" in config.sinks:
        async def read() -> list[dict[str, Any]]:
            engine = connect(config.own_engine() or settings.opensearch, timeout_s=settings.opensearch.timeout_s)
            try:
                return await recorder.find_in_index(engine, config.index, wanted)
            finally:
                await engine.close()

        found = asyncio.run(read())
    elif config.directory:
        found = recorder.find_in_files(Path(config.directory), wanted)
    for record in found:
        sys.stdout.write(orjson.dumps(record).decode() + "\n")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    access = with_config(sub.add_parser(
        "access", help="who was served what: access records as JSON Lines, newest first (docs/access.md)"))
    access.add_argument("--document", default=None, help="records that served this document id")
    access.add_argument("--subject", default=None, help="records of answers for this subject")
    access.add_argument("--kb", default=None, help="records that asked this knowledge base")
    access.add_argument("--since", default=None, help="7d, 12h, 30m, or an ISO 8601 time")
    access.add_argument("--limit", type=int, default=100, help="at most this many records (newest first)")
    access.set_defaults(run=cmd_access)
