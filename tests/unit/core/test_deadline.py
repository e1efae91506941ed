"""core/deadline.py: a request's budget from its Unix-millisecond deadline (refused when nonsense, too far ahead or
already spent within the margin) or from the configured budget, counted on the monotonic clock."""

from __future__ import annotations

import pytest

from es_provider.core.deadline import budget_from_deadline, fixed_budget
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


@pytest.mark.parametrize(("deadline", "remaining"), [
    (NOW + 51, 0.001),  # a millisecond past the margin
    (NOW + 600_000, 599.95),  # as far ahead as allowed
])
def test_accepted_at_the_bounds(deadline: int, remaining: float) -> None:
    budget = budget_from_deadline(deadline, now_ms=NOW, now_monotonic=100.0, margin_ms=50, max_ahead_ms=600_000)
    assert budget.remaining(100.0) == pytest.approx(remaining)


@pytest.mark.parametrize(("now", "remaining"), [(10.0, 2.5), (11.0, 1.5), (12.5, 0.0), (13.0, -0.5)])
def test_a_fixed_budget_counts_down_on_the_monotonic_clock(now: float, remaining: float) -> None:
    assert fixed_budget(2500, now_monotonic=10.0).remaining(now) == pytest.approx(remaining)
