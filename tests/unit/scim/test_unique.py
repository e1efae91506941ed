"""scim/unique.py: what scim2-models holds unique (a user's userName, compared as it compares) and the claim
document's id that holds it: named by attribute and value, by the value's digest when too long for an engine id,
and never one value's claim for another."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from es_provider.scim.unique import MAX_ID_BYTES, claim_id, unique_values

from .models import GROUP_MODEL, USER_MODEL, USER_NAME


@pytest.mark.parametrize(("value", "expected"), [
    ("bjensen", f"unique:{USER_NAME}:bjensen"),
    ("jöns@example.com", f"unique:{USER_NAME}:jöns@example.com"),
    ("a" * 400, f"unique:{USER_NAME}:" + "a" * 400),
])
def test_a_claim_is_named_by_its_attribute_and_value(value: str, expected: str) -> None:
    assert claim_id(USER_NAME, value) == expected


@pytest.mark.parametrize("value", ["a" * 500, "é" * 300, "x" * 10_000])
def test_a_value_too_long_for_an_engine_id_is_claimed_by_its_digest(value: str) -> None:
    ident = claim_id(USER_NAME, value)
    assert ident.startswith(f"unique:{USER_NAME}:sha256:") and len(ident.encode()) <= MAX_ID_BYTES
    assert ident == claim_id(USER_NAME, value) != claim_id(USER_NAME, value + "y")


@pytest.mark.parametrize(("resource", "values"), [
    pytest.param({"userName": "BJensen"}, {USER_NAME: "bjensen"}, id="case-insensitive (caseExact false)"),
    pytest.param({"userName": "Ame\u0301lie"}, {USER_NAME: "am\u00e9lie"}, id="NFC"),
    pytest.param({"userName": "bjensen", "externalId": "X", "displayName": "B"}, {USER_NAME: "bjensen"},
                 id="only userName is unique"),
])
def test_unique_values_are_what_scim2_models_compares(resource: dict[str, Any], values: dict[str, str]) -> None:
    assert unique_values(USER_MODEL.model_validate(resource)) == values


def test_groups_hold_no_unique_value() -> None:
    """RFC 7643 gives a group's displayName no uniqueness: two groups may share a name (and so an ACL group)."""
    assert unique_values(GROUP_MODEL.model_validate({"displayName": "Eng", "externalId": "x"})) == {}


@pytest.mark.parametrize(("first", "second"), [
    pytest.param("a" * 470, "sha256:" + hashlib.sha256(b"a" * 470).hexdigest(),
                 id="a long value and the plain form of its digest"),
    pytest.param("sha256:x", "sha256:y", id="two short values that look hashed"),
    pytest.param("b" * 470, "b" * 471, id="two long values"),
])
def test_no_value_is_claimed_under_another_values_claim(first: str, second: str) -> None:
    assert claim_id(USER_NAME, first) != claim_id(USER_NAME, second)
    for value in (first, second):
        assert len(claim_id(USER_NAME, value).encode()) <= MAX_ID_BYTES
