"""core/naming.py: a knowledge base's indices are `<alias>-v<N>`; a hit's index names its alias and version by the
same rule, and an index of another alias (or no version) is none of its."""

from __future__ import annotations

import pytest

from es_provider.core.naming import alias_of_index, index_name, index_pattern, version_of


@pytest.mark.parametrize(("alias", "version", "index"), [("docs", 1, "docs-v1"), ("team-a-docs", 12, "team-a-docs-v12")])
def test_an_index_is_named_by_its_alias_and_version(alias: str, version: int, index: str) -> None:
    assert index_name(alias, version) == index
    assert (version_of(index, alias), alias_of_index(index)) == (version, alias)


def test_the_pattern_takes_every_version() -> None:
    assert index_pattern("docs") == "docs-v*"


@pytest.mark.parametrize(("index", "alias", "version"), [
    ("docs-v3", "docs", 3),
    ("docs-v3", "doc", None),  # another alias's index
    ("my-docs-v3", "docs", None),
    ("docs-v", "docs", None),
    ("docs-vx", "docs", None),
    ("docs", "docs", None),
    ("docs-v2-v3", "docs-v2", 3),
])
def test_the_version_of_an_index(index: str, alias: str, version: int | None) -> None:
    assert version_of(index, alias) == version


@pytest.mark.parametrize(("index", "alias"), [("docs-v3", "docs"), ("docs", "docs"), ("docs-v2-v3", "docs-v2"),
                                              (".ds-logs-000001", ".ds-logs-000001")])
def test_the_alias_of_an_index(index: str, alias: str) -> None:
    assert alias_of_index(index) == alias
