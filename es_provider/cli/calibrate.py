"""`es-provider calibrate`: fits the score mappings on judged queries and prints the `[scoring.*]` tables for the
configuration (docs/retrieval.md#scores); offline/calibrate.py collects and fits, this reads the judged sets."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from es_provider.cli.common import EXIT_USAGE, fail, find_kb, with_config, with_engine
from es_provider.config.settings import Settings
from es_provider.engine.client import Engine
from es_provider.search import embedders


def cmd_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    from es_provider.offline import calibrate
    from es_provider.search.rerank import Reranker, RerankFault

    weights = args.weight or [1.0] * len(args.kb)
    if args.for_kb and len(set(args.kb)) != 1:
        return fail("--for-kb fits one knowledge base's own mappings: give one --kb", EXIT_USAGE)
    if not (len(args.kb) == len(args.queries) == len(args.qrels) == len(weights)):
        return fail("give --kb, --queries and --qrels (and --weight, if any) once per judged set, in the same order",
                    EXIT_USAGE)
    sets = []
    for kb_id, queries, qrels, weight in zip(args.kb, args.queries, args.qrels, weights, strict=True):
        try:
            texts, judgments = calibrate.load_judgments(Path(queries), Path(qrels))
        except (OSError, ValueError, KeyError) as exc:
            return fail(f"judgments: {exc}")
        kb = find_kb(settings, kb_id)
        sets.append((kb, calibrate.Judged(texts, judgments, weight=weight, schema=kb.index_schema)))

    async def work(engine: Engine) -> int:
        reranker = Reranker(settings.rerank, os.environ) if settings.rerank is not None else None
        try:
            for kb, judged in sets:
                reranks = reranker is not None and settings.reranks({kb.id}, "bm25")
                async with embedders.opened(settings, kb, os.environ) as embedder:
                    try:
                        depth = (kb.scoring or settings.scoring).fusion_depth
                        await calibrate.collect(engine, kb, judged, embedder, depth=depth,
                                                reranker=reranker if reranks else None)
                    except RerankFault as fault:
                        return fail(f"the reranker failed ({fault.reason}: {fault.detail})")
                print(f"{kb.id}: {len(judged.queries)} judged queries{' (reranked)' if reranks else ''}",
                      file=sys.stderr)
        finally:
            if reranker is not None:
                await reranker.close()
        fitted = calibrate.fit_all([judged for _, judged in sets])
        if fitted.hybrid_ndcg:
            print(f"hybrid nDCG@10 by BM25 share: {fitted.hybrid_ndcg}", file=sys.stderr)
        print(fitted.toml("knowledge.scoring" if args.for_kb else "scoring"), end="")
        return 0

    return asyncio.run(with_engine(settings, work))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    calibrate = with_config(sub.add_parser(
        "calibrate", help="fit the score mappings on judged queries; prints [scoring.*] for the configuration"))
    calibrate.add_argument("--kb", action="append", required=True, help="a knowledge base holding the judged corpus")
    calibrate.add_argument("--queries", action="append", required=True, help="its queries.jsonl (_id, text)")
    calibrate.add_argument("--qrels", action="append", required=True, help="its judgments TSV (header line first)")
    calibrate.add_argument("--weight", action="append", type=float,
                           help="its share of the fit (default: every set counts equally, whatever its size)")
    calibrate.add_argument("--for-kb", action="store_true",
                           help="print [knowledge.scoring.*]: that knowledge base's own mappings (paste them under "
                                "its [[knowledge]] block), not the service-wide [scoring.*]")
    calibrate.set_defaults(run=cmd_calibrate)
