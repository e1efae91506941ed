"""`es-provider kb create|list|reindex|drop`: a knowledge base's index lifecycle (ingest/admin.py does the work).
Each subcommand takes only its own options: `--mappings` and `--replicas` shape a new index (create, reindex),
`--exist-ok` is create's and `--delete-old` reindex's; list and drop take only the knowledge base."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

import orjson

from es_provider.cli.common import fail, find_kb, read_only_refusal, with_config, with_engine
from es_provider.config.settings import Settings
from es_provider.engine.client import Engine
from es_provider.ingest import admin
from es_provider.search import embedders


def cmd_kb(args: argparse.Namespace, settings: Settings) -> int:
    async def work(engine: Engine) -> int:
        if args.kb_command == "list":
            kbs = [find_kb(settings, args.kb)] if args.kb else settings.knowledge
            for kb in kbs:
                print(orjson.dumps(await admin.describe(engine, kb)).decode())
            return 0
        kb = find_kb(settings, args.kb)
        if args.kb_command == "drop":
            dropped = await admin.drop(engine, kb)
            print(f"knowledge base {kb.id}: dropped {', '.join(dropped) or 'nothing'}")
            return 0
        body = admin.index_body(settings, kb, Path(args.mappings), replicas=args.replicas)
        if kb.embedder is not None and not await engine.knn_available():
            return fail(f"knowledge base {kb.id} has an embedder, but OpenSearch has no k-NN plugin on every node")
        if args.kb_command == "create":
            index = await admin.create(engine, kb, body, exist_ok=args.exist_ok)
        else:
            async with embedders.opened(settings, kb, os.environ) as embedder:
                index = await admin.reindex(engine, kb, body, delete_old=args.delete_old, embedder=embedder)
        print(f"knowledge base {kb.id}: alias {kb.alias} → {index}")
        return 0

    if args.kb_command != "list" and (why := read_only_refusal(find_kb(settings, args.kb), f"kb {args.kb_command}")):
        return fail(why)
    return asyncio.run(with_engine(settings, work, writes="kb reindex" if args.kb_command == "reindex" else None))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kb = sub.add_parser("kb", help="knowledge base index lifecycle")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True)
    for name in ("create", "list", "reindex", "drop"):
        p = with_config(kb_sub.add_parser(name))
        p.add_argument("--kb", required=name != "list")
        if name in ("create", "reindex"):  # a new index: its body from the mappings, its replica count
            p.add_argument("--mappings", default=str(admin.DEFAULT_MAPPINGS))
            p.add_argument("--replicas", type=int, default=None)
        if name == "create":
            p.add_argument("--exist-ok", action="store_true", help="succeed if it already exists")
        if name == "reindex":
            p.add_argument("--delete-old", action="store_true", help="delete the previous index after the swap")
        p.set_defaults(run=cmd_kb)
