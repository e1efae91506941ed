from __future__ import annotations

import pytest

from es_provider.core.deadline import budget_from_deadline
from es_provider.core.errors import ErrorCode, KnowledgeError

NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("deadline", "code", "status"),
    [
        (NOW - 1, ErrorCode.TIMED_OUT, 504),
        (NOW + 10, ErrorCode.TIMED_OUT, 504),  # within the 50 ms margin
        (-5, ErrorCode.PROTOCOL_ERROR, 400),
        (NOW + 600_001, ErrorCode.PROTOCOL_ERROR, 400),
    ],
)
def test_refused_deadlines(deadline: int, code: ErrorCode, status: int) -> None:
    with pytest.raises(KnowledgeError) as caught:
        budget_from_deadline(deadline, now_ms=NOW, now_monotonic=100.0, margin_ms=50, max_ahead_ms=600_000)
    assert (caught.value.code, caught.value.status) == (code, status)


def test_budget_is_deadline_minus_margin() -> None:
    budget = budget_from_deadline(NOW + 1000, now_ms=NOW, now_monotonic=100.0, margin_ms=50, max_ahead_ms=600_000)
    assert budget.remaining(100.0) == pytest.approx(0.95)
