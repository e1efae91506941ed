"""cli/workers.py's pure part: what `serve --workers` takes (the supervisor itself, its workers started, replaced
and stopped: tests/integration/test_workers.py)."""

from __future__ import annotations

import os

import pytest

from es_provider.cli.workers import count


@pytest.mark.parametrize(("value", "workers"), [("1", 1), ("4", 4)])
def test_workers_count(value: str, workers: int) -> None:
    assert count(value) == workers


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_workers_count_refuses(value: str) -> None:
    with pytest.raises(ValueError):
        count(value)


def test_workers_auto_is_the_usable_cores() -> None:
    assert count("auto") == len(os.sched_getaffinity(0))
