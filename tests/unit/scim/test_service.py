"""scim/service.py: the credential check and its lock-out, how a request reaches scim2-server, SCIM error bodies,
what the service announces, one resource's writes in turn, and a group's name compared case-exactly. Table-driven;
no engine."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request
from scim2_models import ScimFilter
from scim2_server.utils import parametrize

from es_provider.core.errors import ErrorCode, KnowledgeError, protocol_error, unauthenticated
from es_provider.scim import service as scim

from .models import GROUP_MODEL, PROVIDER, USER_MODEL, USER_TYPE

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


def test_a_group_name_is_case_exact_in_the_schema_and_in_filters() -> None:
    from scim2_models import CaseExact

    assert GROUP_MODEL.get_field_annotation("display_name", CaseExact) == CaseExact.true
    secret = GROUP_MODEL.model_validate({"displayName": "g-secret"})
    assert parametrize(ScimFilter, GROUP_MODEL)('displayName eq "g-secret"').match(secret)
    assert not parametrize(ScimFilter, GROUP_MODEL)('displayName eq "G-SECRET"').match(secret)
    assert USER_MODEL.get_field_annotation("user_name", CaseExact) == CaseExact.false  # userName stays as it was
