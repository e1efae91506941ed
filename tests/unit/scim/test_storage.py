"""scim/storage.py: a resource's version is its write counter, as a weak ETag (W/"<n>"); anything else names no
version this storage issued."""

from __future__ import annotations

import pytest

from es_provider.scim.storage import counter_of, version_of


@pytest.mark.parametrize(("version", "counter"), [
    ('W/"1"', 1), ('W/"42"', 42), ('W/"007"', 7), ('"3"', 0), ('W/"x"', 0), ("W/1", 0), ("", 0), (None, 0),
    ('W/"' + "9" * 19 + '"', 0),  # no counter this storage issues
])
def test_versions_are_counters(version: str | None, counter: int) -> None:
    assert counter_of(version) == counter
    if counter:
        assert counter_of(version_of(counter)) == counter
