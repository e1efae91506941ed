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


async def with_engine(settings: Settings, work: Callable[[Engine], Awaitable[int]]) -> int:
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
