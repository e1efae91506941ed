"""Guessing the workbench key (issue 27): every key attempt counts as a failure until the key proves right; an
address with GUESSES_PER_ADDRESS failures in the window, or everybody once GUESSES_IN_TOTAL, waits until the oldest
leaves the window. Pure: times are given."""

from __future__ import annotations

import re

import pytest

from es_provider.edge.guard import GUESS_WINDOW_S, GUESSES_IN_TOTAL, GUESSES_PER_ADDRESS, Guard
from es_provider.web.login import key_fingerprint

W = GUESS_WINDOW_S
A, B = "192.0.2.1", "192.0.2.2"

# (time, address, key right?) → the wait answered (0: the key was checked)
Step = tuple[float, str, bool]


def run(steps: list[Step], guard: Guard | None = None) -> list[float]:
    guard = guard or Guard()
    waits = []
    for now, address, right in steps:
        wait = guard.try_key(address, now)
        if wait == 0 and right:
            guard.forgive(address, now)
        waits.append(round(wait, 3))
    return waits


WRONG_FIVE = [(float(t), A, False) for t in range(GUESSES_PER_ADDRESS)]


@pytest.mark.parametrize(("steps", "waits"), [
    pytest.param([*WRONG_FIVE, (5.0, A, False)], [0] * 5 + [W - 5], id="a sixth wrong key waits"),
    pytest.param([*WRONG_FIVE, (5.0, A, True)], [0] * 5 + [W - 5], id="so does the right key"),
    pytest.param([*WRONG_FIVE, (5.0, B, True), (5.0, B, False)], [0] * 7, id="another address is not locked"),
    pytest.param([*WRONG_FIVE, (W, A, False), (W + 0.5, A, False)], [0] * 6 + [0.5],
                 id="the window slides: one left it"),
    pytest.param([*WRONG_FIVE, (W + 4, A, False)], [0] * 6, id="all of them left it"),
    pytest.param([*WRONG_FIVE, (10.0, A, False), (30.0, A, True), (W, A, True)], [0] * 5 + [W - 10, W - 30, 0],
                 id="waiting does not extend the lockout"),
    pytest.param([(float(t), A, True) for t in range(50)], [0] * 50, id="right keys never count"),
    pytest.param([(float(t), A, t % 2 == 1) for t in range(8)] + [(9.0, A, False), (10.0, A, False)],
                 [0] * 9 + [W - 10], id="a right key neither counts nor resets the wrong ones"),
    pytest.param([(0.0, A, False)] * 4 + [(1.0, A, True), (2.0, A, False), (3.0, A, True)], [0] * 6 + [W - 3],
                 id="the fifth wrong key locks, a right one before it does not"),
])
def test_failures_per_address(steps: list[Step], waits: list[float]) -> None:
    assert run(steps) == waits


def test_failures_in_total_lock_every_address() -> None:
    addresses = [f"198.51.100.{i}" for i in range(GUESSES_IN_TOTAL)]
    spread = [(1.0, address, False) for address in addresses]  # one each: no address reaches its own limit
    assert run([*spread, (2.0, A, True), (W + 1, A, True)]) == [0] * GUESSES_IN_TOTAL + [W - 1, 0]


def test_an_attempt_counts_until_its_key_proves_right() -> None:
    # Concurrent logins: each is counted before its body (with the key) is read, so they cannot all slip in.
    guard = Guard()
    assert [guard.try_key(A, 0.0) for _ in range(GUESSES_PER_ADDRESS + 2)] == [0] * GUESSES_PER_ADDRESS + [W, W]
    guard.forgive(A, 0.0)  # one of them had the right key
    assert guard.try_key(A, 1.0) == 0
    assert guard.try_key(A, 1.0) == W - 1


def test_the_address_table_is_bounded_and_forgets() -> None:
    guard = Guard(max_addresses=3)
    for i in range(10):
        guard.try_key(f"203.0.113.{i}", float(i))
    assert guard.addresses() == 3
    guard.try_key(A, 100.0)  # everything before has left the window
    assert guard.addresses() == 1


@pytest.mark.parametrize("key", [b"wrong-key-0123456789", b"", b"x" * 10_000, "é".encode()])
def test_a_fingerprint_is_short_stable_within_the_process_and_keyed(key: bytes) -> None:
    import hashlib

    print_ = key_fingerprint(key)
    assert re.fullmatch("[0-9a-f]{8}", print_) and key_fingerprint(key) == print_
    assert print_ != hashlib.sha256(key).hexdigest()[:8]  # keyed: a log reader cannot test guesses offline
    assert key_fingerprint(key + b"!") != print_


def test_a_patient_guesser_holds_no_more_than_its_window() -> None:
    guard = Guard()
    for minute in range(100):  # five wrong keys a minute, for 100 minutes, while others keep failing too
        for t in range(GUESSES_PER_ADDRESS):
            assert guard.try_key(A, minute * W + t) == 0
            guard.try_key(f"203.0.113.{minute}", minute * W + t)
    assert len(guard._by_address[A]) == GUESSES_PER_ADDRESS
