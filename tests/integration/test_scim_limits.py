"""scim_bounds through the real app (issue 37, finding 4): each bound a 400 in SCIM's error body, logged, changing
nothing; a group may not grow past MAX_GROUP_MEMBERS by any write, but one already past it may always shrink (a
removal, a deleted user leaving it): deprovisioning is never refused."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import orjson
import pytest
from helpers.scim_calls import ERROR, GROUP, SCIM, TOKEN, USER, patch
from helpers.setup import new_kb

from es_provider.scim import bounds as scim_bounds


@pytest.fixture
async def client(client_for, store) -> Any:
    return await client_for(new_kb(), env={"SCIM_TOKEN": TOKEN}, scim={"enabled": True, "token_ref": "SCIM_TOKEN"},
                            directory={"index": store})


async def send(client: Any, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
    response = await client.request(method, f"/scim/v2{path}", data=data, headers=SCIM)
    raw = await response.read()
    return response.status, orjson.loads(raw) if raw else {}


async def test_each_bound_is_a_400_in_scim_terms_and_changes_nothing(client, caplog) -> None:
    _, group = await send(client, "POST", "/Groups", {"schemas": [GROUP], "displayName": "g"})
    removes = patch(*({"op": "remove", "path": f'members[value eq "{n}"]'} for n in range(300)))
    terms = " or ".join(f'userName eq "u{n}"' for n in range(2000))  # the tester's 49 KB filter
    few = " or ".join(f'userName eq "u{n}"' for n in range(21))
    cases = [("PATCH", f"/Groups/{group['id']}", removes, "invalidValue", "at most 100 operations"),
             ("POST", "/.search", orjson.dumps({"filter": terms}), "tooMany", "2048 characters"),
             ("POST", "/Users/.search", orjson.dumps({"filter": few}), "tooMany", "more than 20 comparisons"),
             ("GET", f"/Users?filter=userName%20eq%20%22{'x' * 3000}%22", None, "tooMany", "2048 characters")]
    for method, path, body, scim_type, detail in cases:
        with caplog.at_level(logging.INFO):
            status, answer = await send(client, method, path, body)
        assert status == 400, (path, answer)
        assert answer["schemas"] == [ERROR] and answer["scimType"] == scim_type and detail in answer["detail"]
        assert any("refused 400" in r.getMessage() and scim_type in r.getMessage() for r in caplog.records)
    assert (await send(client, "GET", f"/Groups/{group['id']}"))[1]["meta"]["version"] == 'W/"1"'


async def test_a_group_never_grows_past_the_bound_and_may_always_shrink(client, monkeypatch) -> None:
    users = [(await send(client, "POST", "/Users", {"schemas": [USER], "userName": f"u{n}@x.com"}))[1]["id"]
             for n in range(4)]
    status, group = await send(client, "POST", "/Groups", {"schemas": [GROUP], "displayName": "g",
                                                           "members": [{"value": u} for u in users]})
    assert status == 201
    monkeypatch.setattr(scim_bounds, "MAX_GROUP_MEMBERS", 2)  # the group is now past the bound
    path = f"/Groups/{group['id']}"
    status, answer = await send(client, "PATCH", path, patch({"op": "add", "path": "members",
                                                              "value": [{"value": uuid.uuid4().hex}]}))
    assert status == 400 and answer["scimType"] == "invalidValue" and "more than 2 members" in answer["detail"]
    status, answer = await send(client, "POST", "/Groups", {"schemas": [GROUP], "displayName": "h", "members": [
        {"value": u} for u in users[:3]]})
    assert status == 400 and answer["scimType"] == "invalidValue"
    status, answer = await send(client, "PATCH", path, patch({"op": "remove", "path": f'members[value eq "{users[0]}"]'}))
    assert status == 200 and len(answer["members"]) == 3  # shrinking, still past the bound: allowed
    assert (await send(client, "DELETE", f"/Users/{users[1]}"))[0] == 204  # leaves the group: allowed
    _, answer = await send(client, "GET", path)
    assert sorted(m["value"] for m in answer["members"]) == sorted(users[2:])
