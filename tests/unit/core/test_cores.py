"""core/cores.py: the cores this process may use are its CPU affinity where the platform has one, else the
machine's count, and never none."""

from __future__ import annotations

import os

import pytest

from es_provider.core.cores import usable_cores


@pytest.mark.parametrize(("affinity", "count", "cores"), [
    ({0, 2, 5}, 8, 3),  # pinned to three of eight
    (None, 8, 8),  # no affinity on this platform (macOS)
    (None, None, 1),  # a count the platform cannot tell
])
def test_usable_cores(monkeypatch: pytest.MonkeyPatch, affinity: set[int] | None, count: int | None,
                      cores: int) -> None:
    if affinity is None:
        monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    else:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: count)
    assert usable_cores() == cores
