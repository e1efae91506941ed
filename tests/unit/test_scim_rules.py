"""The SCIM service's pure parts (scim.py, scim_storage.py): versions, unique-value claims, which filters the store
narrows and to what, the credential check, how a request reaches scim2-server, SCIM error bodies, and what the
service announces. Table-driven; no engine."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request
from scim2_models import ScimFilter
from scim2_server.utils import parametrize

from es_provider import scim
from es_provider.errors import ErrorCode, KnowledgeError, protocol_error, unauthenticated
from es_provider.scim_storage import (
    MAX_ID_BYTES,
    Narrowed,
    claim_id,
    counter_of,
    narrowing,
    unique_values,
    version_of,
)

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
USER_NAME = f"{USER}:userName"
PROVIDER = scim.service().provider
USER_TYPE, GROUP_TYPE = (next(rt for rt in PROVIDER.resource_types if rt.name == name) for name in ("User", "Group"))
USER_MODEL: Any = PROVIDER.model_for(USER_TYPE)
GROUP_MODEL: Any = PROVIDER.model_for(GROUP_TYPE)


@pytest.mark.parametrize(("version", "counter"), [
    ('W/"1"', 1), ('W/"42"', 42), ('W/"007"', 7), ('"3"', 0), ('W/"x"', 0), ("W/1", 0), ("", 0), (None, 0),
    ('W/"' + "9" * 19 + '"', 0),  # no counter this storage issues
])
def test_versions_are_counters(version: str | None, counter: int) -> None:
    assert counter_of(version) == counter
    if counter:
        assert counter_of(version_of(counter)) == counter


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


USERS_IN = {"bool": {"filter": [{"term": {"kind": "User"}}]}}


def user_filter(text: str) -> Any:
    return parametrize(ScimFilter, USER_MODEL)(text)


@pytest.mark.parametrize(("text", "subject_attribute", "narrowed"), [
    ('userName eq "BJensen"', "userName", Narrowed(claim=f"unique:{USER_NAME}:bjensen")),
    (f'{USER_NAME} eq "BJensen"', "userName", Narrowed(claim=f"unique:{USER_NAME}:bjensen")),
    ('userName eq "BJensen"', "externalId", Narrowed(claim=f"unique:{USER_NAME}:bjensen")),
    ('id eq "abc"', "userName", Narrowed(ids=("user:abc",))),
    ('externalId eq "0a21"', "externalId", Narrowed(query={"bool": {"filter": [
        {"term": {"kind": "User"}}, {"terms": {"subject": ["0a21"]}}]}})),
    ('externalId eq "Ame\u0301lie"', "externalId", Narrowed(query={"bool": {"filter": [
        {"term": {"kind": "User"}}, {"terms": {"subject": ["Ame\u0301lie", "Am\u00e9lie"]}}]}})),
    ('externalId eq "0a21"', "userName", None),  # not the subject: not indexed
    ('userName co "jens"', "userName", None),
    ('userName eq "a" and active eq true', "userName", None),
    ('userName eq "a" or userName eq "b"', "userName", None),
    ('emails.value eq "a@example.com"', "userName", None),
    ('emails[type eq "work"].value eq "a@example.com"', "userName", None),
    ("active eq true", "userName", None),
    ('displayName eq "Babs"', "userName", None),
    ('name.givenName eq "Babs"', "userName", None),
])
def test_which_user_filters_are_narrowed_in_the_engine(text: str, subject_attribute: Any,
                                                       narrowed: Narrowed | None) -> None:
    assert narrowing(user_filter(text), "User", subject_attribute) == narrowed


@pytest.mark.parametrize(("text", "narrowed"), [
    ('displayName eq "Sales EMEA"', Narrowed(query={"bool": {"filter": [
        {"term": {"kind": "Group"}}, {"term": {"name": {"value": "Sales EMEA", "case_insensitive": True}}}]}})),
    ('id eq "g1"', Narrowed(ids=("group:g1",))),
    ('displayName sw "Sales"', None),
    ('members.value eq "u1"', None),
])
def test_which_group_filters_are_narrowed_in_the_engine(text: str, narrowed: Narrowed | None) -> None:
    assert narrowing(parametrize(ScimFilter, GROUP_MODEL)(text), "Group", "userName") == narrowed


def test_no_filter_or_an_unbound_one_reads_the_kind() -> None:
    assert narrowing(None, "User", "userName") is None
    assert narrowing(ScimFilter('userName eq "x"'), "User", "userName") is None  # no model: nothing to resolve


TOKEN = b"scim-token-0123456789abcdef"


@pytest.mark.parametrize(("authorization", "accepted"), [
    (f"Bearer {TOKEN.decode()}", True),
    (f"bearer {TOKEN.decode()}", True),
    (f"Bearer   {TOKEN.decode()}  ", True),
    (None, False),
    ("", False),
    ("Bearer", False),
    ("Bearer ", False),
    (f"Basic {TOKEN.decode()}", False),
    (f"Bearer {TOKEN.decode()}x", False),
    (f"Bearer {TOKEN.decode()[:-1]}", False),
    (f"Bearer {TOKEN.decode()} extra", False),
    ("Bearer test-api-key-0123456789", False),
])
def test_only_its_own_bearer_token_passes(authorization: str | None, accepted: bool) -> None:
    app: Any = {scim.TOKEN: TOKEN}
    headers = {"Authorization": authorization} if authorization is not None else {}
    request = make_mocked_request("GET", "/scim/v2/Users", headers=headers, app=app)
    if accepted:
        scim.authenticate(request)
        return
    with pytest.raises(KnowledgeError) as refused:
        scim.authenticate(request)
    assert refused.value.status == 401 and refused.value.code is ErrorCode.ACCESS_DENIED


@pytest.mark.parametrize(("method", "url", "path", "query"), [
    ("GET", "/scim/v2", "", {}),
    ("GET", "/scim/v2/", "/", {}),
    ("GET", "/scim/v2/Users", "/Users", {}),
    ("GET", "/scim/v2/Users/abc", "/Users/abc", {}),
    ("POST", "/scim/v2/Users/.search", "/Users/.search", {}),
    ("GET", "/scim/v2/Users.scim", "/Users", {}),
    ("GET", "/scim/v2/Users?filter=userName%20eq%20%22a%22&count=5", "/Users", {"filter": 'userName eq "a"',
                                                                                 "count": "5"}),
    ("PATCH", "/scim/v2/Groups/g1", "/Groups/g1", {}),
])
def test_a_request_reaches_scim2_server_relative_to_the_scim_root(method: str, url: str, path: str,
                                                                   query: dict[str, str]) -> None:
    request = make_mocked_request(method, url, headers={"Host": "kb.example.com", "If-Match": 'W/"2"'})
    wanted = scim.scim_request(request, b"{}")
    assert (wanted.method, wanted.path, dict(wanted.query), wanted.body) == (method, path, query, b"{}")
    assert wanted.base_url == "http://kb.example.com/scim/v2"
    assert wanted.header("if-match") == 'W/"2"'


@pytest.mark.parametrize(("error", "status", "detail"), [
    (unauthenticated("scim: no bearer token"), 401, "Authentication failed."),
    (protocol_error("body is too large", status=413), 413, "body is too large"),
    (protocol_error("content encoding must be identity (compressed bodies are not accepted)", status=415), 415,
     "content encoding must be identity (compressed bodies are not accepted)"),
    (KnowledgeError(ErrorCode.RATE_LIMITED), 429, "The knowledge service is busy; retry later."),
    (KnowledgeError(ErrorCode.UNAVAILABLE, detail="engine error 500: secret detail"), 503,
     "The knowledge service is unavailable."),
    (KnowledgeError(ErrorCode.PROTOCOL_ERROR, status=404), 404, "The request is malformed."),
])
def test_refusals_are_scim_errors(error: KnowledgeError, status: int, detail: str) -> None:
    response = scim.error_response(error)
    assert response.status == status and response.content_type == "application/scim+json"
    assert response.body is not None
    body = orjson.loads(bytes(response.body))  # type: ignore[arg-type]
    assert body == {"schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"], "status": str(status),
                    "detail": detail}
    assert ("WWW-Authenticate" in response.headers) == (status == 401)


def test_what_the_service_announces() -> None:
    config = scim.service().config
    assert config.patch is not None and config.patch.supported
    assert config.bulk is not None and not config.bulk.supported
    assert config.change_password is not None and not config.change_password.supported
    assert config.filter is not None and config.filter.supported and config.filter.max_results == scim.MAX_RESULTS
    assert config.sort is not None and config.sort.supported
    assert config.etag is not None and config.etag.supported
    assert config.pagination is None  # startIndex/count only (no cursors)
    assert [s.type.value for s in config.authentication_schemes or [] if s.type] == ["oauthbearertoken"]
    assert sorted(rt.name for rt in PROVIDER.resource_types) == ["Group", "User"]
    assert [ext.schema_ for ext in USER_TYPE.schema_extensions or []] == [
        "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"]


async def test_turns_serialise_one_resource_and_forget_it_after() -> None:
    turns = scim.Turns()
    order: list[str] = []

    async def write(key: str, name: str, hold: float) -> None:
        async with turns.of(key):
            order.append(f"{name}+")
            await asyncio.sleep(hold)
            order.append(f"{name}-")

    await asyncio.gather(write("User/1", "a", 0.02), write("User/1", "b", 0), write("User/2", "c", 0))
    assert order.index("a-") < order.index("b+")  # one resource: one at a time
    assert order.index("c+") < order.index("a-")  # another resource does not wait
    assert len(turns) == 0
