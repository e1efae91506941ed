"""What one SCIM request may ask (scim_bounds, issue 37 finding 4): each bound refused with its 400 and scimType on
the raw request, before anything is parsed or applied; what identity providers send passes."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from scim2_models import SCIMException

from es_provider.scim import bounds as scim_bounds
from es_provider.scim.bounds import MAX_FILTER_CHARS, MAX_FILTER_TERMS, MAX_GROUP_MEMBERS, MAX_OPERATIONS

PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"


def ors(terms: int) -> str:
    return " or ".join(f'userName eq "u{n}@example.com"' for n in range(terms))


def patch(*operations: dict[str, Any]) -> bytes:
    return orjson.dumps({"schemas": [PATCH_OP], "Operations": list(operations)})


def members(count: int) -> list[dict[str, str]]:
    return [{"value": uuid.uuid4().hex} for _ in range(count)]


def removes(count: int) -> bytes:
    return patch(*({"op": "remove", "path": f'members[value eq "{uuid.uuid4().hex}"]'} for _ in range(count)))


PASSES = [
    pytest.param("GET", "/Users", {"filter": 'userName eq "dana@example.com"'}, b"", id="okta-lookup"),
    pytest.param("GET", "/Users", {"filter": ors(MAX_FILTER_TERMS)}, b"", id="terms-at-the-bound"),
    pytest.param("GET", "/Users", {"filter": f'userName eq "{"x" * (MAX_FILTER_CHARS - 14)}"'}, b"",
                 id="characters-at-the-bound"),
    pytest.param("GET", "/Users", {"filter": 'displayName eq "a eq b or c ne d and e pr"'}, b"",
                 id="operators-inside-a-string-are-no-terms"),
    pytest.param("PATCH", "/Groups/g", {}, removes(MAX_OPERATIONS), id="operations-at-the-bound"),
    pytest.param("PATCH", "/Groups/g", {}, patch({"op": "add", "path": "members", "value": members(
        MAX_GROUP_MEMBERS)}), id="members-at-the-bound"),
    pytest.param("PATCH", "/Users/u", {}, patch({"op": "replace", "value": {"active": False}}), id="entra-deactivation"),
    pytest.param("POST", "/Groups", {}, orjson.dumps({"schemas": [GROUP], "displayName": "g",
                                                      "members": members(MAX_GROUP_MEMBERS)}), id="group-at-the-bound"),
    pytest.param("POST", "/.search", {}, orjson.dumps({"filter": ors(MAX_FILTER_TERMS)}), id="search-at-the-bound"),
    pytest.param("POST", "/Users", {}, b"not json", id="not-json-is-scim2-server-s-to-refuse"),
    pytest.param("POST", "/Users", {}, b"[1, 2]", id="not-an-object-is-scim2-server-s-to-refuse"),
]

REFUSED = [
    pytest.param("GET", "/Users", {"filter": ors(MAX_FILTER_TERMS + 1)}, b"", "tooMany", id="terms"),
    pytest.param("GET", "/Users", {"filter": ors(2000)}, b"", "tooMany", id="the-49-kb-filter"),
    pytest.param("GET", "/Groups", {"filter": f'displayName eq "{"x" * MAX_FILTER_CHARS}"'}, b"", "tooMany",
                 id="characters"),
    pytest.param("POST", "/.search", {}, orjson.dumps({"filter": ors(2000)}), "tooMany", id="root-search"),
    pytest.param("POST", "/Users/.search", {}, orjson.dumps({"filter": ors(MAX_FILTER_TERMS + 1)}), "tooMany",
                 id="users-search"),
    pytest.param("PATCH", "/Groups/g", {}, removes(MAX_OPERATIONS + 1), "invalidValue", id="operations"),
    pytest.param("PATCH", "/Groups/g", {}, removes(300), "invalidValue", id="the-300-removes"),
    pytest.param("PATCH", "/Groups/g", {}, patch({"op": "remove", "path": f"members[{ors(MAX_FILTER_TERMS + 1)}]"}),
                 "tooMany", id="a-path-filter-with-too-many-terms"),
    pytest.param("PATCH", "/Groups/g", {}, patch({"op": "add", "path": "members", "value": members(
        MAX_GROUP_MEMBERS + 1)}), "invalidValue", id="members-in-one-operation"),
    pytest.param("PATCH", "/Groups/g", {}, patch(*({"op": "add", "path": "members", "value": members(
        MAX_GROUP_MEMBERS // 2 + 1)} for _ in range(2))), "invalidValue", id="members-across-operations"),
    pytest.param("PATCH", "/Groups/g", {}, patch({"op": "replace", "value": {"members": members(
        MAX_GROUP_MEMBERS + 1)}}), "invalidValue", id="members-in-a-replace-without-path"),
    pytest.param("PUT", "/Groups/g", {}, orjson.dumps({"schemas": [GROUP], "displayName": "g",
                                                       "members": members(MAX_GROUP_MEMBERS + 1)}),
                 "invalidValue", id="a-replaced-group"),
]


@pytest.mark.parametrize(("method", "path", "query", "body"), PASSES)
def test_what_identity_providers_send_passes(method: str, path: str, query: dict[str, str], body: bytes) -> None:
    scim_bounds.check_request(method, path, query, body)


@pytest.mark.parametrize(("method", "path", "query", "body", "scim_type"), REFUSED)
def test_past_a_bound_is_a_400_with_its_scim_type(method: str, path: str, query: dict[str, str], body: bytes,
                                                  scim_type: str) -> None:
    with pytest.raises(SCIMException) as refused:
        scim_bounds.check_request(method, path, query, body)
    assert refused.value.status == 400 and refused.value.scim_type == scim_type


@pytest.mark.parametrize(("text", "terms"), [
    pytest.param('userName eq "a"', 1, id="one"),
    pytest.param('userName eq "a" or userName eq "b"', 2, id="two"),
    pytest.param('emails[type eq "work" and value co "@x"]', 2, id="a-value-path"),
    pytest.param('title pr and not (userName EQ "x")', 2, id="pr-not-and-case"),
    pytest.param('userName eq "say \\" eq \\" twice"', 1, id="an-escaped-quote"),
    pytest.param('userName eq "unterminated eq eq', 1, id="an-unterminated-string"),
    pytest.param('members[value eq "a"]', 1, id="a-patch-path"),
    pytest.param("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber eq \"1\"", 1,
                 id="a-urn"),
])
def test_terms_are_the_comparisons_outside_strings(text: str, terms: int) -> None:
    assert scim_bounds.filter_terms(text) == terms
