"""A writer in its own process, for the reindex-under-writes test: grants, revokes, deletes and ingests, each
document touched by one operation, paced over a window and many in flight, each logged with its outcome and times.

    python -m helpers.writes PLAN.json LOG.jsonl    (run with tests/ on the path)
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from es_provider.config.knowledge import KnowledgeBase
from es_provider.engine.client import Engine
from es_provider.ingest import admin
from es_provider.ingest.records import DocumentRecord, SourceDocument
from es_provider.ingest.writer import ingest


async def one(engine: Engine, kb: KnowledgeBase, op: dict[str, Any], wait_s: float) -> int:
    kind, doc = op["kind"], op["document"]
    if kind == "grant":
        return await admin.set_acl(engine, kb, doc, grant=True, subjects=[op["subject"]], groups=[], public=None,
                                   block_wait_s=wait_s)
    if kind == "revoke":
        return await admin.set_acl(engine, kb, doc, grant=False, subjects=[op["subject"]], groups=[], public=None,
                                   block_wait_s=wait_s)
    if kind == "delete":
        return await admin.delete_document(engine, kb, doc, block_wait_s=wait_s)
    record = DocumentRecord.model_validate(op["record"])
    summary = await ingest(engine, kb, [SourceDocument.of(record)], block_wait_s=wait_s)
    if summary.failures:
        raise RuntimeError("; ".join(summary.failures))
    return summary.chunks


async def main(plan: dict[str, Any], lines: list[str]) -> None:
    kb = KnowledgeBase.model_validate(plan["kb"], strict=False)
    engine = Engine(plan["url"], timeout_s=60)
    started = time.monotonic()

    async def run(op: dict[str, Any]) -> None:
        await asyncio.sleep(max(0.0, started + op["at_s"] - time.monotonic()))
        begun = time.time()
        try:
            changed = await one(engine, kb, op, plan["wait_s"])
            outcome = {"ok": True, "changed": changed}
        except Exception as exc:  # recorded, never swallowed: the test reads every outcome
            outcome = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        lines.append(json.dumps({**op, **outcome, "begun": begun, "acknowledged": time.time()}))

    try:
        await asyncio.gather(*(run(op) for op in plan["ops"]))
    finally:
        await engine.close()


if __name__ == "__main__":
    outcomes: list[str] = []
    try:
        asyncio.run(main(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")), outcomes))
    finally:
        Path(sys.argv[2]).write_text("\n".join(outcomes) + "\n", encoding="utf-8")
