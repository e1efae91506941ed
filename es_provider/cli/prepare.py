"""`es-provider prepare`: makes the service's own indices ahead of time (edge/own_indices.py) — the replay store, the
principal store and the access record's next days — as a user of the ingest duty, so a serve user that may not
create indices finds them there (docs/cluster.md "Least privilege"). Exit 1 when one could not be made."""

from __future__ import annotations

import argparse
import asyncio

from es_provider.cli.common import EXIT_FAILED, with_config
from es_provider.config.settings import Settings
from es_provider.core.errors import KnowledgeError
from es_provider.edge import own_indices
from es_provider.engine.client import Engine, connect


def cmd_prepare(args: argparse.Namespace, settings: Settings) -> int:
    async def work() -> int:
        main = connect(settings.opensearch)
        cluster = settings.access_log.own_engine()
        access = connect(cluster, timeout_s=settings.opensearch.timeout_s) if cluster is not None else main
        failed = 0
        try:
            for index in own_indices.wanted(settings, own_indices.today(), args.days):
                engine: Engine = access if index.access else main
                try:
                    outcome = "made" if await own_indices.ensure(engine, index) else "there"
                except KnowledgeError as exc:
                    outcome, failed = f"FAILED: {exc.detail or exc.code.value}", failed + 1
                print(f"{index.name}\t{index.purpose}\t{outcome}")
        finally:
            await main.close()
            if access is not main:
                await access.close()
        return EXIT_FAILED if failed else 0

    return asyncio.run(work())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    prepare = with_config(sub.add_parser(
        "prepare", help="make the service's own indices ahead of time (replays, principal store, access days)"))
    prepare.add_argument("--days", type=int, default=7,
                         help="the access record's indices for this many days from today, UTC (default 7)")
    prepare.set_defaults(run=cmd_prepare)
