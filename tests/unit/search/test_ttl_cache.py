"""The retrieval flow's one TTL cache (mapped ACL fields, metadata types), on an injected clock."""

from __future__ import annotations

import pytest

from es_provider.search.ttl_cache import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# Each step: ("put", key, value) or ("get", key, expected) or ("wait", seconds, None); the cache's ttl is 10 s.
@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([("get", "a", None)], id="miss"),
        pytest.param([("put", "a", 1), ("get", "a", 1)], id="hit"),
        pytest.param([("put", "a", 1), ("wait", 9.9, None), ("get", "a", 1)], id="hit-just-before-expiry"),
        pytest.param([("put", "a", 1), ("wait", 10.0, None), ("get", "a", None)], id="expired-at-ttl"),
        pytest.param([("put", "a", 1), ("wait", 60.0, None), ("get", "a", None)], id="expired-long-ago"),
        pytest.param([("put", "a", 1), ("put", "a", 2), ("get", "a", 2)], id="overwritten"),
        pytest.param([("put", "a", 1), ("wait", 8.0, None), ("put", "a", 2), ("wait", 8.0, None), ("get", "a", 2)],
                     id="overwrite-restarts-the-ttl"),
        pytest.param([("put", "a", 1), ("wait", 11.0, None), ("put", "a", 2), ("get", "a", 2)],
                     id="refilled-after-expiry"),
        pytest.param([("put", "a", 1), ("get", "b", None)], id="other-key-misses"),
        pytest.param([("put", "a", 1), ("wait", 5.0, None), ("put", "b", 2), ("wait", 5.0, None),
                      ("get", "a", None), ("get", "b", 2)], id="each-key-expires-on-its-own"),
    ],
)
def test_ttl_cache(steps: list[tuple[str, object, object]]) -> None:
    clock = Clock()
    cache: TtlCache[str, object] = TtlCache(10.0, clock=clock)
    for op, arg, value in steps:
        if op == "put":
            cache.put(str(arg), value)
        elif op == "wait":
            assert isinstance(arg, float)
            clock.now += arg
        else:
            assert cache.get(str(arg)) == value, (op, arg)


def test_a_falsy_value_is_a_hit() -> None:
    # An index with no ACL field mapped caches the empty set: that is an answer, not a miss.
    cache: TtlCache[str, set[str]] = TtlCache(10.0, clock=Clock())
    cache.put("a", set())
    assert cache.get("a") == set()
    assert cache.get("b") is None
