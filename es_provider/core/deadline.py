"""Deadline arithmetic (docs/protocols.md §7). Pure: callers pass the clocks in."""

from __future__ import annotations

from dataclasses import dataclass

from es_provider.core.errors import ErrorCode, KnowledgeError, protocol_error


@dataclass(frozen=True, slots=True)
class Budget:
    """Time left for one request, anchored on a monotonic clock so wall-clock jumps cannot stretch it."""

    expires_at: float  # monotonic seconds

    def remaining(self, now_monotonic: float) -> float:
        return self.expires_at - now_monotonic


def budget_from_deadline(
    deadline_ms: int,
    *,
    now_ms: int,
    now_monotonic: float,
    margin_ms: int,
    max_ahead_ms: int,
) -> Budget:
    """The budget for a Unix-millisecond deadline; refuses nonsense and already-spent deadlines."""
    if deadline_ms < 0:
        raise protocol_error("deadline must be a non-negative Unix time in milliseconds")
    ahead = deadline_ms - now_ms
    if ahead > max_ahead_ms:
        raise protocol_error("deadline is too far in the future")
    budget_ms = ahead - margin_ms
    if budget_ms <= 0:
        raise KnowledgeError(ErrorCode.TIMED_OUT, detail=f"deadline passed {-ahead} ms ago (margin {margin_ms} ms)")
    return Budget(expires_at=now_monotonic + budget_ms / 1000.0)


def fixed_budget(budget_ms: int, *, now_monotonic: float) -> Budget:
    """The configured budget for protocols that carry no deadline."""
    return Budget(expires_at=now_monotonic + budget_ms / 1000.0)
