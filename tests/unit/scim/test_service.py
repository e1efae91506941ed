"""The SCIM service's pure parts (scim/service.py, storage.py, claims.py, narrowing.py): versions, unique-value
claims, which filters the store narrows and to what, the credential check, how a request reaches scim2-server, SCIM
error bodies, and what the service announces. Table-driven; no engine."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request
from scim2_models import ScimFilter
from scim2_server.utils import parametrize

from es_provider.core.errors import ErrorCode, KnowledgeError, protocol_error, unauthenticated
from es_provider.scim import service as scim
from es_provider.scim.narrowing import Narrowed, narrowing
from es_provider.scim.patch import normalised
from es_provider.scim.storage import counter_of, version_of
from es_provider.scim.unique import MAX_ID_BYTES, claim_id, unique_values

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
    # caseExact (issue 37): the exact name, as an ACL group matches it
    ('displayName eq "Sales EMEA"', Narrowed(query={"bool": {"filter": [
        {"term": {"kind": "Group"}}, {"term": {"name": "Sales EMEA"}}]}})),
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
    app: Any = {scim.TOKEN: TOKEN, scim.GUARD: scim.Guard()}
    headers = {"Authorization": authorization} if authorization is not None else {}
    request = make_mocked_request("GET", "/scim/v2/Users", headers=headers, app=app)
    if accepted:
        scim.authenticate(request)
        return
    with pytest.raises(KnowledgeError) as refused:
        scim.authenticate(request)
    assert refused.value.status == 401 and refused.value.code is ErrorCode.ACCESS_DENIED


@pytest.mark.parametrize("everybody", [False, True], ids=["this-address", "everybody"])
def test_the_right_token_passes_a_lockout_and_a_wrong_one_does_not(everybody: bool) -> None:
    """Issue 52, finding 8: only wrong tokens are throttled. Once this address (or every address together) has
    used up its wrong tokens, a wrong one is a 429 and counts nothing more; the right one is accepted, counting
    nothing either."""
    guard = scim.Guard(per_address=3, in_total=3)
    app: Any = {scim.TOKEN: TOKEN, scim.GUARD: guard}

    def sent(authorization: str | None) -> Any:
        headers = {"Authorization": authorization} if authorization is not None else {}
        return make_mocked_request("GET", "/scim/v2/Users", headers=headers, app=app)

    for n in range(3):
        with pytest.raises(KnowledgeError) as refused:
            scim.authenticate(sent(f"Bearer wrong-{n}-0123456789abcdef") if n else sent(None))
        assert refused.value.status == 401
    if everybody:  # another address entirely: the total is used up
        guard = app[scim.GUARD] = scim.Guard(per_address=3, in_total=3)
        for n in range(3):
            guard.try_key(f"192.0.2.{n}", time.monotonic())
    locked = scim.authenticate(sent("Bearer wrong-again-0123456789abcdef"))
    assert locked is not None and locked.status == 429 and 0 < int(locked.headers["Retry-After"]) <= 60
    for _ in range(5):
        assert scim.authenticate(sent(f"Bearer {TOKEN.decode()}")) is None
    assert scim.authenticate(sent(None)) is not None  # no token at all is no right token


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


# --- issue 37: PATCH made explicit (scim_patch.normalised), claims, group names ---

UID, OTHER = "a" * 32, "b" * 32
MEMBERS = [{"value": UID, "display": "u-dana", "$ref": f"https://kb/scim/v2/Users/{UID}", "type": "User"},
           {"value": OTHER, "display": "u-erin"}]


def group(members: list[dict[str, Any]] | None = None) -> Any:
    return GROUP_MODEL.model_validate({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "id": "g1",
                                       "displayName": "eng-team", "members": MEMBERS if members is None else members})


def applied(resource: Any, *operations: dict[str, Any]) -> Any:
    """What scim.Service.apply_patch does: the operations made explicit, then applied by scim2-models."""
    from scim2_models import Context, PatchOp

    with PROVIDER:  # scim.POLICY: Entra ID's value lists are read
        patch_op = PatchOp[type(resource)].model_validate(  # type: ignore[misc]
            {"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"], "Operations": list(operations)},
            scim_ctx=Context.RESOURCE_PATCH_REQUEST)
        before = resource.model_dump()
        done = normalised(patch_op.operations, resource)
        assert resource.model_dump() == before  # pure: the resource is not changed
        type(patch_op)(operations=done).patch(resource)
    return resource


@pytest.mark.parametrize(("operations", "left"), [
    pytest.param([{"op": "remove", "path": f'members[value eq "{UID}"]'}], [OTHER], id="okta filtered path"),
    pytest.param([{"op": "remove", "path": f'members.value eq "{UID}"'}], [OTHER], id="bare comparison"),
    pytest.param([{"op": "Remove", "path": "members", "value": [{"value": UID}]}], [OTHER], id="entra value list"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID, "display": "Dana R."}]}], [OTHER],
                 id="a display that differs from the stored one"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID, "$ref": "https://elsewhere/x"}]}],
                 [OTHER], id="a $ref"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID, "type": "Group"}]}], [OTHER],
                 id="a type"),
    pytest.param([{"op": "remove", "path": "members", "value": {"Value": UID}}], [OTHER],
                 id="one object, its key in another case"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID}, {"value": OTHER}]}], [],
                 id="every member"),
    pytest.param([{"op": "remove", "path": f'members[value eq "{UID}" or value eq "0000"]'}], [OTHER],
                 id="a filter that matches one of two"),
    pytest.param([{"op": "remove", "path": 'members[display eq "u-erin"]'}], [UID], id="a filter on display"),
    pytest.param([{"op": "remove", "path": "members"}], [], id="every member, by path"),
    pytest.param([{"op": "add", "path": "members", "value": [{"value": "c" * 32}]},
                  {"op": "remove", "path": 'members[value eq "cccccccccccccccccccccccccccccccc"]'}], [UID, OTHER],
                 id="an add, then its removal"),
    pytest.param([{"op": "replace", "path": f'members[value eq "{OTHER}"].display', "value": "Erin"},
                  {"op": "remove", "path": 'members[display eq "Erin"]'}], [UID],
                 id="a filter on what an earlier operation wrote"),
    pytest.param([{"op": "replace", "path": "displayName", "value": "x"},
                  {"op": "remove", "path": "members", "value": [{"value": UID}]}], [OTHER],
                 id="another attribute first"),
])
def test_a_member_removal_removes_by_value(operations: list[dict[str, Any]], left: list[str]) -> None:
    patched = applied(group(), *operations)
    assert [member.value for member in patched.members or []] == left
    kept = {member.value: member for member in patched.members or []}
    if OTHER in kept and len(operations) == 1:
        assert kept[OTHER].display == "u-erin"  # what is left keeps what it had


@pytest.mark.parametrize("operations", [
    pytest.param([{"op": "remove", "path": 'members[value eq "0000"]'}], id="an unknown id"),
    pytest.param([{"op": "remove", "path": f'members[value eq "{UID.upper()}"]'}], id="the id in another case"),
    pytest.param([{"op": "remove", "path": 'members[display eq "nobody"]'}], id="a display nobody has"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": "0000"}]}], id="a value list, unknown"),
    pytest.param([{"op": "remove", "path": "members", "value": [{"value": UID}, {"value": "0000"}]}],
                 id="a value list, one of two unknown"),
    pytest.param([{"op": "remove", "path": 'members[value eq "0000"].display'}], id="a sub-attribute, unmatched"),
    pytest.param([{"op": "replace", "path": 'members[value eq "X"].display', "value": "M"}],
                 id="a replace through an unmatched filter (would add member X)"),
    pytest.param([{"op": "add", "path": 'members[value eq "X"].display', "value": "M"}],
                 id="an add through an unmatched filter"),
    pytest.param([{"op": "replace", "path": 'members[value eq "X"]', "value": {"display": "M"}}],
                 id="a replace of an unmatched entry"),
    pytest.param([{"op": "remove", "path": f'members[value eq "{UID}"]'},
                  {"op": "remove", "path": f'members[value eq "{UID}"]'}], id="twice the same member"),
    pytest.param([{"op": "remove", "path": "members"}, {"op": "remove", "path": f'members[value eq "{UID}"]'}],
                 id="after every member was removed"),
])
def test_what_matches_nothing_is_no_target(operations: list[dict[str, Any]]) -> None:
    from scim2_models import NoTargetException

    resource = group()
    with pytest.raises(NoTargetException):
        applied(resource, *operations)
    assert [member.value for member in resource.members] == [UID, OTHER]


def test_a_member_named_without_a_value_is_an_invalid_value() -> None:
    from scim2_models import InvalidValueException

    with pytest.raises(InvalidValueException):
        applied(group(), {"op": "remove", "path": "members", "value": [{"display": "u-dana"}]})


def test_a_users_filtered_remove_must_match_and_entras_filtered_replace_still_creates() -> None:
    from scim2_models import NoTargetException

    user = USER_MODEL.model_validate({"userName": "dana", "emails": [{"type": "work", "value": "d@x.com"}]})
    with pytest.raises(NoTargetException):
        applied(user, {"op": "remove", "path": 'emails[type eq "home"]'})
    with pytest.raises(NoTargetException):
        applied(user, {"op": "remove", "path": "emails", "value": [{"value": "other@x.com"}]})
    applied(user, {"op": "Replace", "path": 'phoneNumbers[type eq "mobile"].value', "value": "+1 555"})
    assert [(p.type, p.value) for p in user.phone_numbers] == [("mobile", "+1 555")]
    applied(user, {"op": "remove", "path": "emails", "value": [{"value": "d@x.com"}]})
    assert user.emails is None


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


def test_a_group_name_is_case_exact_in_the_schema_and_in_filters() -> None:
    from scim2_models import CaseExact

    assert GROUP_MODEL.get_field_annotation("display_name", CaseExact) == CaseExact.true
    secret = GROUP_MODEL.model_validate({"displayName": "g-secret"})
    assert parametrize(ScimFilter, GROUP_MODEL)('displayName eq "g-secret"').match(secret)
    assert not parametrize(ScimFilter, GROUP_MODEL)('displayName eq "G-SECRET"').match(secret)
    assert USER_MODEL.get_field_annotation("user_name", CaseExact) == CaseExact.false  # userName stays as it was
