"""wait_out_block: a write through an alias is retried while the index is write-blocked, and run again when a
reindex swapped the alias while it ran (it may have changed the retired index only)."""

from __future__ import annotations

from typing import Any

import pytest

from es_provider.core.errors import WriteBlocked
from es_provider.engine.write_block import wait_out_block


class Aliases:
    """An engine whose alias names the indices in `answers`, one answer per question (the last one repeats)."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)

    async def alias_targets(self, alias: str) -> list[str]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.mark.parametrize(("targets", "outcomes", "runs"), [
    ([["kb-v1"]], ["ok"], 1),  # nothing moved
    ([["kb-v1"], ["kb-v2"], ["kb-v2"]], ["ok", "ok"], 2),  # swapped during the first run: once more, on v2
    ([["kb-v1"]], ["blocked", "ok"], 2),  # blocked, then through the alias again
    ([["kb-v1"], ["kb-v2"]], ["blocked", "ok"], 2),  # blocked until the swap: the retry already goes to v2
])
async def test_wait_out_block_runs_the_write_again_until_it_ran_on_a_settled_alias(
        targets: list[list[str]], outcomes: list[str], runs: int) -> None:
    done: list[int] = []

    async def write() -> int:
        done.append(1)
        if outcomes[len(done) - 1] == "blocked":
            raise WriteBlocked("blocked")
        return len(done)

    engine: Any = Aliases(*targets)
    assert await wait_out_block(write, 5.0, engine=engine, alias="kb") == runs
    assert len(done) == runs


async def test_without_an_alias_it_only_waits_out_blocks() -> None:
    calls: list[int] = []

    async def write() -> str:
        calls.append(1)
        return "done"

    assert await wait_out_block(write, 1.0) == "done" and calls == [1]
