"""The one retry policy for conditional writes that lost a race (raced.py): how many tries, on what, what is raised
when they run out, and how long it waits between two tries."""

from __future__ import annotations

import pytest

from es_provider.core import raced


class Lost(Exception):
    """Stands for a lost race (scim.storage.Raced, the engine's VersionConflict)."""


class Other(Exception):
    """Any other failure: never tried again."""


def base_wait(lost: int) -> float:
    """The shortest wait after `lost` lost races: doubling from 5 ms, at most 200 ms (the longest is twice it)."""
    return min(0.2, 0.005 * 2 ** (lost - 1))


async def run(outcomes: list[object]) -> tuple[object, int, list[float]]:
    """Runs the policy over `outcomes` (an exception class is raised, anything else returned): what the write
    returned (or the exception it raised), how many tries it took, the waits between them."""
    waits: list[float] = []
    tries = 0
    raised: list[BaseException] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    try:
        async for attempt in raced.retrying(Lost, sleep=sleep):
            with attempt:
                outcome = outcomes[tries]
                tries += 1
                if isinstance(outcome, type) and issubclass(outcome, BaseException):
                    error = outcome(tries)
                    raised.append(error)
                    raise error
                return outcome, tries, waits
    except (Lost, Other) as error:
        assert error is raised[-1]  # the last failure itself, not a wrapper
        return error, tries, waits
    raise AssertionError("the policy ended without an outcome")


@pytest.mark.parametrize(("outcomes", "tries", "result"), [
    pytest.param(["won"], 1, "won", id="wins-at-once"),
    pytest.param([Lost, Lost, Lost, "won"], 4, "won", id="wins-after-three-losses"),
    pytest.param([Lost] * (raced.TRIES - 1) + ["won"], raced.TRIES, "won", id="wins-on-the-last-try"),
    pytest.param([Lost] * raced.TRIES + ["never"], raced.TRIES, Lost, id="loses-every-try-raises-the-last"),
    pytest.param([Other, "never"], 1, Other, id="another-failure-at-once"),
    pytest.param([Lost, Lost, Other, "never"], 3, Other, id="another-failure-after-losses"),
])
async def test_retries_only_lost_races_up_to_tries(outcomes: list[object], tries: int, result: object) -> None:
    outcome, tried, waits = await run(outcomes)
    assert tried == tries
    if isinstance(result, type):
        assert type(outcome) is result
        assert outcome.args == (tries,)  # type: ignore[attr-defined]
    else:
        assert outcome == result
    assert len(waits) == tries - 1  # a wait between two tries, none after the last
    for lost, wait in enumerate(waits, start=1):
        assert base_wait(lost) <= wait < 2 * base_wait(lost)


def test_sixteen_tries() -> None:
    assert raced.TRIES == 16


@pytest.mark.parametrize(("lost", "draw", "wait"), [
    pytest.param(1, 0.0, 0.005, id="first-loss-shortest"),
    pytest.param(1, 0.999, 0.009995, id="first-loss-longest"),
    pytest.param(2, 0.0, 0.01, id="doubles"),
    pytest.param(6, 0.0, 0.16, id="below-the-cap"),
    pytest.param(7, 0.0, 0.2, id="capped"),
    pytest.param(16, 0.5, 0.3, id="capped-then-stretched"),
])
def test_backoff(lost: int, draw: float, wait: float) -> None:
    assert raced.backoff(lost, draw) == pytest.approx(wait)


async def test_waits_are_random_within_bounds() -> None:
    _, _, waits = await run([Lost] * raced.TRIES)
    assert len(set(waits[8:])) > 1  # jittered: racing writers drift apart (7 capped waits all equal: 1 in 10^18)
