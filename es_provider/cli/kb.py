"""`es-provider kb create|list|reindex|drop`: a knowledge base's index lifecycle (ingest/admin.py does the work).
Each subcommand takes only its own options: `--mappings` and `--replicas` shape a new index (create, reindex),
`--exist-ok` is create's and `--delete-old` reindex's; list and drop take only the knowledge base. `kb inspect
--index NAME` proposes a [[knowledge]] block for an existing index (offline/proposal.py); only it and list write
nothing, and the others refuse an existing index's knowledge base."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import orjson

from es_provider.cli.common import fail, find_kb, read_only_refusal, with_config, with_engine
from es_provider.config.settings import Settings
from es_provider.core.deadline import fixed_budget
from es_provider.engine.client import Engine
from es_provider.ingest import admin
from es_provider.offline.proposal import propose
from es_provider.search import embedders


async def inspect(engine: Engine, index: str, sample: int) -> int:
    """`kb inspect`: a proposed [[knowledge]] block for an existing index (a tool's preset where the mapping is that
    tool's), a comment on what each permission field means there, and what could not be decided."""
    mappings = await engine.mappings(index)
    if not mappings:
        return fail(f"no index {index}")
    properties: dict[str, Any] = {}
    for found in mappings.values():  # every index behind an alias: their fields together
        properties |= found
    hits = (await engine.search(index, {"size": sample, "query": {"match_all": {}}},
                                fixed_budget(30_000, now_monotonic=time.monotonic())))["hits"]["hits"]
    proposal = propose(properties, [hit.get("_source") or {} for hit in hits])
    print(f"# A proposal from the mapping of {', '.join(sorted(mappings))} and {len(hits)} sampled documents: read "
          "it, confirm the permission fields (each comment says what one means here), and see "
          "docs/existing-index.md.")
    print(proposal.toml(index), end="")
    for line in proposal.undecided:
        print(f"# undecided: {line}")
    return 0


def cmd_kb(args: argparse.Namespace, settings: Settings) -> int:
    async def work(engine: Engine) -> int:
        if args.kb_command == "inspect":
            return await inspect(engine, args.index, args.sample)
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

    if args.kb_command not in ("list", "inspect") and (why := read_only_refusal(find_kb(settings, args.kb),
                                                                                 f"kb {args.kb_command}")):
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
    p = with_config(kb_sub.add_parser("inspect", help="propose a [[knowledge]] block for an existing index"))
    p.add_argument("--index", required=True, help="the index or alias to read (its mapping and a sample)")
    p.add_argument("--sample", type=int, default=50, help="how many documents to sample (default 50)")
    p.set_defaults(run=cmd_kb)
