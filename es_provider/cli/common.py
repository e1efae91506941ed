"""What every `es-provider` command shares: the one-line failure and its exit codes, the knowledge base a `--kb`
names, an engine closed after the command's work, and the comma-separated name lists of `--subjects`/`--groups`.
Separate so that each command's module (its function beside its arguments) imports these and not another command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable

from es_provider.config.knowledge import KnowledgeBase
from es_provider.config.settings import ConfigError, Settings
from es_provider.engine.client import Engine, connect

EXIT_FAILED = 1
EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"es-provider: {message}", file=sys.stderr)
    return code


def find_kb(settings: Settings, kb_id: str) -> KnowledgeBase:
    kb = settings.knowledge_base(kb_id)
    if kb is None:
        raise ConfigError(f"no [[knowledge]] entry with id {kb_id!r}")
    return kb


def serverless_refusal(settings: Settings, duty: str) -> str | None:
    """Why `duty` (a write) cannot run on OpenSearch Serverless, said before anything is written; None elsewhere."""
    aws = settings.opensearch.aws
    if aws is None or aws.service != "aoss":
        return None
    return (f"{duty} cannot run on OpenSearch Serverless ([opensearch.aws] service = \"aoss\"): it needs refresh, "
            "scrolls, by-query writes and its own document ids, which collections refuse; write into the collection "
            "with its own tools (docs/cluster.md, \"OpenSearch Serverless\")")


def read_only_refusal(kb: KnowledgeBase, duty: str) -> str | None:
    """Why `duty` (a write) cannot run on `kb`: the service never writes to an index it did not create."""
    if not kb.existing:
        return None
    return (f"{duty} refused: knowledge base {kb.id} serves an existing index (schema = \"{kb.schema_name}\"), which "
            "the service reads and never writes; change it with the tools that built it (docs/existing-index.md)")


async def with_engine(settings: Settings, work: Callable[[Engine], Awaitable[int]], *,
                      writes: str | None = None) -> int:
    """`work` on an engine closed afterwards; `writes` names a write duty, refused up front where it cannot run."""
    if writes is not None and (why := serverless_refusal(settings, writes)) is not None:
        return fail(why)
    engine = connect(settings.opensearch)
    try:
        return await work(engine)
    finally:
        await engine.close()


def names(value: str) -> list[str]:
    """One option value as a list: `--groups eng,ops` (repeat the option to add more)."""
    return [name.strip() for name in value.split(",") if name.strip()]


def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--config", required=True, help="the TOML configuration file")
    return p
