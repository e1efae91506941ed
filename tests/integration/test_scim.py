"""The SCIM 2.0 service provider on a real node: its own bearer token, checked before any body is read; what Okta and
Microsoft Entra ID send, and the principal store's documents it leaves (inactive users, members, tombstones);
concurrent writers from two processes; and no route at all when it is disabled. scim2-tester's checks and
scim2-server's storage contract: test_scim_conformance.py."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

import pytest
from helpers.scim_calls import ENTERPRISE, ERROR, GROUP, SCIM_TYPE, TOKEN, USER, auth, patch
from helpers.setup import API_KEY, api_key, new_kb

from es_provider.core.deadline import fixed_budget
from es_provider.edge.service import SERVICES
from es_provider.engine.client import Engine
from es_provider.identity import directory

WORKBENCH_KEY = "workbench-key-0123456789"


@pytest.fixture
async def scim_app(client_for, store) -> Any:
    """The real app with [scim] enabled (and a platform API key and the workbench, whose keys it must refuse)."""

    async def make(**scim_settings: Any) -> Any:
        kb = new_kb()
        return await client_for(kb, env={"SCIM_TOKEN": TOKEN, "WB_KEY": WORKBENCH_KEY},
                                scim={"enabled": True, "token_ref": "SCIM_TOKEN", **scim_settings},
                                directory={"index": store}, api_keys=[api_key([kb.id])],
                                workbench={"enabled": True, "key_ref": "WB_KEY"})

    return make


async def docs(engine: Engine, index: str, *ids: str) -> dict[str, dict[str, Any]]:
    return {doc["_id"]: doc["_source"] for doc in await engine.get_documents(index, list(ids))}


# --- (a) its own credential, before any body ---


@pytest.mark.parametrize("authorization", [
    None, "Bearer wrong-token-0123456789", f"Bearer {API_KEY}", f"Bearer {WORKBENCH_KEY}", f"Basic {TOKEN}",
    f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer", f"Bearer {TOKEN} {TOKEN}",
])
async def test_anything_but_its_own_token_is_a_401_scim_error(scim_app, authorization, caplog) -> None:
    client = await scim_app()
    headers = {"Content-Type": SCIM_TYPE} | ({"Authorization": authorization} if authorization else {})
    for method, path in (("GET", "/scim/v2/Users"), ("GET", "/scim/v2/ServiceProviderConfig"),
                         ("POST", "/scim/v2/Users"), ("DELETE", "/scim/v2/Groups/x"), ("GET", "/scim/v2/nowhere")):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            response = await client.request(method, path, headers=headers, data=json.dumps(
                {"schemas": [USER], "userName": "mallory"}))
        assert response.status == 401, (method, path)
        assert response.content_type == SCIM_TYPE
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="SCIM"'
        assert await response.json() == {"schemas": [ERROR], "status": "401", "detail": "Authentication failed."}
        refusals = [r for r in caplog.records if r.name == "es_provider.scim"]
        assert len(refusals) == 1 and refusals[0].levelno == logging.WARNING
        assert getattr(refusals[0], "remote", None) == "127.0.0.1"
        assert all(TOKEN not in r.getMessage() and WORKBENCH_KEY not in r.getMessage() for r in caplog.records)
    listed = await client.get("/scim/v2/Users", headers=auth())
    assert listed.status == 200 and (await listed.json())["totalResults"] == 0


async def test_the_token_is_checked_before_the_body_is_read(scim_app) -> None:
    """A sender that announces a body and never sends it is answered 401 at once: neither the 10 s body timeout
    (408) nor the size limit (413) is reached, so nothing was read before the token was checked."""
    client = await scim_app()
    for length in (60_000, 500_000_000):
        for token in ("wrong-token-0123456789", API_KEY):
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write((f"POST /scim/v2/Users HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                          f"Content-Type: {SCIM_TYPE}\r\nContent-Length: {length}\r\n\r\n").encode() + b"{" * 100)
            await writer.drain()
            started = time.monotonic()
            status_line = await asyncio.wait_for(reader.readline(), timeout=5)
            assert status_line.startswith(b"HTTP/1.1 401"), status_line
            assert time.monotonic() - started < 2
            writer.close()
    # The right token with that stalled body: the body is waited for (bounded by admission), never answered 401.
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write((f"POST /scim/v2/Users HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                  f"Content-Type: {SCIM_TYPE}\r\nContent-Length: 500000000\r\n\r\n").encode())
    await writer.drain()
    assert (await asyncio.wait_for(reader.readline(), timeout=5)).startswith(b"HTTP/1.1 413")
    writer.close()


async def test_a_compressed_body_is_refused_unread_in_scim_terms(scim_app) -> None:
    client = await scim_app()
    response = await client.post("/scim/v2/Users", headers={**auth(), "Content-Encoding": "gzip"}, data=b"\x1f\x8b")
    assert response.status == 415 and response.content_type == SCIM_TYPE
    assert (await response.json())["schemas"] == [ERROR]


# --- (b) what Okta and Microsoft Entra ID send, and what the store keeps ---

OKTA_USER = {
    "schemas": [USER], "userName": "okta.user@example.com", "name": {"givenName": "Okta", "familyName": "User"},
    "emails": [{"primary": True, "value": "okta.user@example.com", "type": "work"}], "displayName": "Okta User",
    "locale": "en-US", "externalId": "00ujl29u0le5T6Aj10h7", "groups": [], "password": "1mz050nq", "active": True,
}


async def test_okta_provisions_deactivates_and_deprovisions(scim_app, engine, store) -> None:
    client = await scim_app()
    # "Test connector configuration", then the existence check before a create
    connect = await client.get("/scim/v2/Users", params={"startIndex": "1", "count": "2"}, headers=auth())
    assert connect.status == 200 and (await connect.json())["totalResults"] == 0
    query = {"filter": 'userName eq "okta.user@example.com"', "startIndex": "1", "count": "100"}
    assert (await (await client.get("/scim/v2/Users", params=query, headers=auth())).json())["totalResults"] == 0
    created = await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(OKTA_USER))
    assert created.status == 201, await created.text()
    user = await created.json()
    uid = user["id"]
    assert "password" not in user and created.headers["ETag"] == 'W/"1"'
    stored = (await docs(engine, store, directory.doc_id("User", uid)))[directory.doc_id("User", uid)]
    assert stored["kind"] == "User" and stored["subject"] == "okta.user@example.com" and stored["active"] is True
    assert "password" not in stored["resource"]  # never kept
    # userName is found whatever its case (caseExact false), and it is unique whatever its case
    found = await (await client.get("/scim/v2/Users", params={"filter": 'userName eq "OKTA.User@Example.com"'},
                                    headers=auth())).json()
    assert [r["id"] for r in found["Resources"]] == [uid]
    again = await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {**OKTA_USER, "userName": "Okta.User@example.com"}))
    assert again.status == 409 and (await again.json())["scimType"] == "uniqueness"
    # deactivation: a replace without path whose value is an object
    deactivated = await client.patch(f"/scim/v2/Users/{uid}", headers=auth(), data=patch(
        {"op": "replace", "value": {"active": False}}))
    assert deactivated.status == 200 and (await deactivated.json())["active"] is False
    assert (await docs(engine, store, f"user:{uid}"))[f"user:{uid}"]["active"] is False
    # a profile push: PUT of the whole user, active again
    replaced = await client.put(f"/scim/v2/Users/{uid}", headers=auth(), data=json.dumps(
        {**OKTA_USER, "id": uid, "displayName": "Okta U.", "active": True}))
    assert replaced.status == 200 and replaced.headers["ETag"] == 'W/"3"'
    assert (await docs(engine, store, f"user:{uid}"))[f"user:{uid}"]["active"] is True
    # group push: create, add a member, remove it with a filtered path, rename, delete
    group = await client.post("/scim/v2/Groups", headers=auth(), data=json.dumps(
        {"schemas": [GROUP], "displayName": "Engineering", "members": []}))
    assert group.status == 201
    gid = (await group.json())["id"]
    added = await client.patch(f"/scim/v2/Groups/{gid}", headers=auth(), data=patch(
        {"op": "add", "path": "members", "value": [{"value": uid, "display": "okta.user@example.com"}]}))
    assert added.status == 200
    assert (await docs(engine, store, f"group:{gid}"))[f"group:{gid}"]["members"] == [uid]
    removed = await client.patch(f"/scim/v2/Groups/{gid}", headers=auth(), data=patch(
        {"op": "remove", "path": f'members[value eq "{uid}"]'}))
    assert removed.status == 200
    assert (await docs(engine, store, f"group:{gid}"))[f"group:{gid}"]["members"] == []
    renamed = await client.patch(f"/scim/v2/Groups/{gid}", headers=auth(), data=patch(
        {"op": "replace", "value": {"id": gid, "displayName": "Engineering EU"}}))
    assert renamed.status == 200
    assert (await docs(engine, store, f"group:{gid}"))[f"group:{gid}"]["name"] == "Engineering EU"
    assert (await client.delete(f"/scim/v2/Groups/{gid}", headers=auth())).status == 204
    assert (await client.delete(f"/scim/v2/Users/{uid}", headers=auth())).status == 204
    left = await docs(engine, store, f"group:{gid}", f"user:{uid}", "tombstone:okta.user@example.com")
    assert left == {"tombstone:okta.user@example.com": {"kind": "Tombstone", "subject": "okta.user@example.com"}}
    # the userName is free again once its user is gone
    assert (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(OKTA_USER))).status == 201


ENTRA_USER = {
    "schemas": [USER, ENTERPRISE], "externalId": "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef",
    "userName": "Test_User_ab6490ee@contoso.com", "active": True,
    "emails": [{"primary": True, "type": "work", "value": "Test_User_fd0ea19b@contoso.com"}],
    "meta": {"resourceType": "User"}, "name": {"formatted": "givenName familyName", "familyName": "familyName",
                                               "givenName": "givenName"},
    "roles": [], ENTERPRISE: {"department": "Engineering", "employeeNumber": "1234"},
}


async def test_entra_id_provisions_with_its_own_forms(scim_app, engine, store) -> None:
    client = await scim_app()
    # "Test connection": a user that does not exist
    probe = await client.get("/scim/v2/Users", params={"filter": f'userName eq "{uuid.uuid4()}"'}, headers=auth())
    assert probe.status == 200 and (await probe.json())["totalResults"] == 0
    created = await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(ENTRA_USER))
    assert created.status == 201, await created.text()
    uid = (await created.json())["id"]
    assert (await created.json())[ENTERPRISE]["department"] == "Engineering"
    by_external = await (await client.get("/scim/v2/Users", params={
        "filter": f'externalId eq "{ENTRA_USER["externalId"]}"'}, headers=auth())).json()
    assert [r["id"] for r in by_external["Resources"]] == [uid]
    # capitalised ops, a boolean as a string, a filtered path to a work email, an Add to an empty attribute
    changed = await client.patch(f"/scim/v2/Users/{uid}", headers=auth(), data=patch(
        {"op": "Replace", "path": "active", "value": "False"},
        {"op": "Replace", "path": 'emails[type eq "work"].value', "value": "moved@contoso.com"},
        {"op": "Add", "path": "name.givenName", "value": "Given"},
        {"op": "Replace", "path": "phoneNumbers[type eq \"mobile\"].value", "value": "+1 555 0100"}))
    assert changed.status == 200, await changed.text()
    body = await changed.json()
    assert body["active"] is False and body["emails"] == [{"primary": True, "type": "work",
                                                           "value": "moved@contoso.com"}]
    assert body["phoneNumbers"] == [{"type": "mobile", "value": "+1 555 0100"}]
    assert (await docs(engine, store, f"user:{uid}"))[f"user:{uid}"]["active"] is False
    reactivated = await client.patch(f"/scim/v2/Users/{uid}", headers=auth(), data=patch(
        {"op": "Replace", "path": "active", "value": "True"}))
    assert (await reactivated.json())["active"] is True
    # groups: create, find by displayName without members, add and remove members as Entra sends them
    group = await client.post("/scim/v2/Groups", headers=auth(), data=json.dumps({
        "schemas": [GROUP], "externalId": "8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159", "displayName": "Sales EMEA",
        "meta": {"resourceType": "Group"}}))
    assert group.status == 201
    gid = (await group.json())["id"]
    listed = await (await client.get("/scim/v2/Groups", params={
        "filter": 'displayName eq "Sales EMEA"', "excludedAttributes": "members"}, headers=auth())).json()
    assert [r["id"] for r in listed["Resources"]] == [gid]
    # caseExact (issue 37): another spelling names another ACL group, so it finds nothing
    other = await (await client.get("/scim/v2/Groups", params={"filter": 'displayName eq "sales emea"'},
                                    headers=auth())).json()
    assert other["totalResults"] == 0
    single = await client.get(f"/scim/v2/Groups/{gid}", params={"excludedAttributes": "members"}, headers=auth())
    assert single.status == 200 and "members" not in await single.json()
    added = await client.patch(f"/scim/v2/Groups/{gid}", headers=auth(), data=patch(
        {"op": "Add", "path": "members", "value": [{"value": uid}]}))
    assert added.status == 200
    assert (await docs(engine, store, f"group:{gid}"))[f"group:{gid}"]["members"] == [uid]
    removed = await client.patch(f"/scim/v2/Groups/{gid}", headers=auth(), data=patch(
        {"op": "Remove", "path": "members", "value": [{"value": uid}]}))
    assert removed.status == 200, await removed.text()
    assert (await docs(engine, store, f"group:{gid}"))[f"group:{gid}"]["members"] == []
    # a deleted user leaves every group that listed it, and a tombstone under its subject
    await client.patch(f"/scim/v2/Groups/{gid}", headers=auth(), data=patch(
        {"op": "Add", "path": "members", "value": [{"value": uid}]}))
    assert (await client.delete(f"/scim/v2/Users/{uid}", headers=auth())).status == 204
    left = await docs(engine, store, f"group:{gid}", f"user:{uid}", f"tombstone:{ENTRA_USER['userName']}")
    assert left[f"group:{gid}"]["members"] == [] and f"user:{uid}" not in left
    assert left[f"tombstone:{ENTRA_USER['userName']}"]["kind"] == "Tombstone"
    members = await (await client.get(f"/scim/v2/Groups/{gid}", headers=auth())).json()
    assert "members" not in members and members["meta"]["version"] == 'W/"5"'


async def test_external_id_as_the_subject(scim_app, engine, store) -> None:
    """[scim] subject_attribute = "externalId": the subject is the directory's object id; a changed one leaves a
    tombstone, and `externalId eq` is found without reading the directory."""
    client = await scim_app(subject_attribute="externalId")
    created = await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(ENTRA_USER))
    uid = (await created.json())["id"]
    assert (await docs(engine, store, f"user:{uid}"))[f"user:{uid}"]["subject"] == ENTRA_USER["externalId"]
    found = await (await client.get("/scim/v2/Users", params={
        "filter": f'externalId eq "{ENTRA_USER["externalId"]}"'}, headers=auth())).json()
    assert [r["id"] for r in found["Resources"]] == [uid]
    moved = await client.patch(f"/scim/v2/Users/{uid}", headers=auth(), data=patch(
        {"op": "replace", "path": "externalId", "value": "new-object-id"}))
    assert moved.status == 200
    left = await docs(engine, store, f"user:{uid}", f"tombstone:{ENTRA_USER['externalId']}")
    assert left[f"user:{uid}"]["subject"] == "new-object-id"
    assert left[f"tombstone:{ENTRA_USER['externalId']}"] == {"kind": "Tombstone", "subject": ENTRA_USER["externalId"]}


async def test_a_renamed_user_leaves_a_tombstone_and_frees_its_name(scim_app, engine, store) -> None:
    client = await scim_app()
    uid = (await (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "bjensen"}))).json())["id"]
    renamed = await client.patch(f"/scim/v2/Users/{uid}", headers=auth(), data=patch(
        {"op": "replace", "path": "userName", "value": "babs"}))
    assert renamed.status == 200
    left = await docs(engine, store, f"user:{uid}", "tombstone:bjensen")
    assert left[f"user:{uid}"]["subject"] == "babs" and left["tombstone:bjensen"]["kind"] == "Tombstone"
    assert (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "BJENSEN"}))).status == 201
    assert (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "Babs"}))).status == 409


async def test_an_abandoned_claim_is_taken_over_a_recent_one_is_not(scim_app, engine, store) -> None:
    """A writer that died between its claim and its write leaves a claim nobody holds: after ORPHAN_CLAIM_S it no
    longer blocks the name; before, it does (the writer may still be about to write)."""
    from es_provider.scim.claims import ORPHAN_CLAIM_S
    from es_provider.scim.unique import claim_id

    client = await scim_app()
    for name, age, status in (("abandoned", ORPHAN_CLAIM_S + 5, 201), ("in-flight", 1.0, 409)):
        await engine.put_document(store, claim_id(f"{USER}:userName", name), {
            "kind": "Unique", "owner": uuid.uuid4().hex, "resource": {"claimed_at": time.time() - age}},
            index_body=directory.INDEX_BODY)
        created = await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
            {"schemas": [USER], "userName": name.upper()}))
        assert created.status == status, (name, await created.text())
    # a claim whose owner renamed away (and died before releasing it) is abandoned too
    uid = (await (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "still-here"}))).json())["id"]
    await engine.put_document(store, claim_id(f"{USER}:userName", "gave-it-up"), {
        "kind": "Unique", "owner": uid, "resource": {"claimed_at": time.time() - ORPHAN_CLAIM_S - 5}})
    assert (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "gave-it-up"}))).status == 201
    # while a claim whose owner holds the value is never taken, however old
    await engine.put_document(store, claim_id(f"{USER}:userName", "still-here"), {
        "kind": "Unique", "owner": uid, "resource": {"claimed_at": 0}})
    assert (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "Still-Here"}))).status == 409


async def test_a_subject_too_long_for_a_tombstone_is_refused(scim_app) -> None:
    client = await scim_app()
    refused = await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "x" * 600}))
    assert refused.status == 400 and (await refused.json())["scimType"] == "invalidValue"
    assert (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "x" * 400}))).status == 201


async def test_etags_are_checked_in_the_engine(scim_app) -> None:
    client = await scim_app()
    created = await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "etag-user"}))
    uid, first = (await created.json())["id"], created.headers["ETag"]
    read = await client.get(f"/scim/v2/Users/{uid}", headers=auth())
    assert read.headers["ETag"] == first
    assert (await client.get(f"/scim/v2/Users/{uid}", headers={**auth(), "If-None-Match": first})).status == 304
    changed = await client.patch(f"/scim/v2/Users/{uid}", headers={**auth(), "If-Match": first}, data=patch(
        {"op": "replace", "path": "displayName", "value": "E"}))
    assert changed.status == 200 and changed.headers["ETag"] != first
    stale = await client.patch(f"/scim/v2/Users/{uid}", headers={**auth(), "If-Match": first}, data=patch(
        {"op": "replace", "path": "displayName", "value": "F"}))
    assert stale.status == 412
    assert (await client.delete(f"/scim/v2/Users/{uid}", headers={**auth(), "If-Match": first})).status == 412
    assert (await client.delete(f"/scim/v2/Users/{uid}", headers={
        **auth(), "If-Match": changed.headers["ETag"]})).status == 204


async def test_concurrent_writers_in_two_processes_lose_nothing(scim_app) -> None:
    """Two apps over one store (two processes as far as the store can tell): PATCHes adding members to one group
    all land, and one userName created twice at once is created once."""
    first, second = await scim_app(), await scim_app()
    users = []
    for n in range(12):
        created = await first.post("/scim/v2/Users", headers=auth(), data=json.dumps(
            {"schemas": [USER], "userName": f"member-{n}"}))
        users.append((await created.json())["id"])
    gid = (await (await first.post("/scim/v2/Groups", headers=auth(), data=json.dumps(
        {"schemas": [GROUP], "displayName": "crowd"}))).json())["id"]
    answers = await asyncio.gather(*(
        (first if n % 2 else second).patch(f"/scim/v2/Groups/{gid}", headers=auth(), data=patch(
            {"op": "add", "path": "members", "value": [{"value": uid}]})) for n, uid in enumerate(users)))
    assert [a.status for a in answers] == [200] * len(users)
    group = await (await second.get(f"/scim/v2/Groups/{gid}", headers=auth())).json()
    assert sorted(m["value"] for m in group["members"]) == sorted(users)
    assert group["meta"]["version"] == f'W/"{len(users) + 1}"'
    twice = await asyncio.gather(*(app.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "only-once"})) for app in (first, second)))
    assert sorted(a.status for a in twice) == [201, 409]


async def test_a_provisioned_user_has_its_groups_on_the_request_path(scim_app) -> None:
    """What the SCIM service writes is what the platforms' requests read (principals.py)."""
    client = await scim_app()
    uid = (await (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "u-dora"}))).json())["id"]
    await client.post("/scim/v2/Groups", headers=auth(), data=json.dumps(
        {"schemas": [GROUP], "displayName": "eng", "members": [{"value": uid}]}))
    principals = client.server.app[SERVICES].principals

    async def identity_once_polled(wanted: Any) -> Any:
        """The identity, once this process's poller saw the change (within about one poll of the counter)."""
        for _ in range(50):
            found = await principals.identity_of("app-1", "team-a", "u-dora",
                                                 fixed_budget(2000, now_monotonic=time.monotonic()))
            if wanted(found):
                break
            await asyncio.sleep(0.1)
        return found

    found = await identity_once_polled(lambda identity: identity.groups)
    assert found.groups == frozenset({"eng"}) and found.subject_active
    await client.patch(f"/scim/v2/Users/{uid}", headers=auth(), data=patch(
        {"op": "replace", "value": {"active": False}}))
    assert not (await identity_once_polled(lambda identity: not identity.subject_active)).subject_active


async def test_every_change_is_logged_with_its_address_never_the_token(scim_app, caplog) -> None:
    client = await scim_app()
    with caplog.at_level(logging.INFO, logger="es_provider.scim"):
        uid = (await (await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
            {"schemas": [USER], "userName": "logged"}))).json())["id"]
        await client.patch(f"/scim/v2/Users/{uid}", headers=auth(), data=patch(
            {"op": "replace", "path": "active", "value": False}))
        await client.delete(f"/scim/v2/Users/{uid}", headers=auth())
        await client.get("/scim/v2/Users", headers=auth())
    lines = [(r.getMessage(), getattr(r, "remote", None)) for r in caplog.records if r.name == "es_provider.scim"]
    assert lines == [
        (f"scim: create User {uid} method=POST userName=logged active=True", "127.0.0.1"),
        (f"scim: patch User {uid} method=PATCH userName=logged active=False", "127.0.0.1"),
        (f"scim: delete User {uid} method=DELETE", "127.0.0.1"),
    ]


# --- (c) disabled: no route ---


async def test_disabled_there_is_no_scim_route(client_for) -> None:
    client = await client_for(new_kb(), env={"SCIM_TOKEN": TOKEN})
    for path in ("/scim/v2", "/scim/v2/Users", "/scim/v2/ServiceProviderConfig"):
        response = await client.get(path, headers=auth())
        assert response.status == 404 and response.content_type != SCIM_TYPE


async def test_a_replacement_that_leaves_active_out_keeps_a_user_deactivated(scim_app, engine, store) -> None:
    """Review finding: a PUT without `active` reactivated a deactivated user (absent read as true)."""
    client = await scim_app()
    created = await client.post("/scim/v2/Users", headers=auth(), data=json.dumps(
        {"schemas": [USER], "userName": "put.user", "active": False}))
    uid = (await created.json())["id"]
    replaced = await client.put(f"/scim/v2/Users/{uid}", headers=auth(), data=json.dumps(
        {"schemas": [USER], "id": uid, "userName": "put.user", "displayName": "Put User"}))
    assert replaced.status == 200, await replaced.text()
    assert (await docs(engine, store, f"user:{uid}"))[f"user:{uid}"]["active"] is False


async def test_the_scim_endpoints_are_in_openapi_when_enabled(scim_app, client_for) -> None:
    described = await (await (await scim_app()).get("/openapi.json")).json()
    assert {"get", "post"} <= set(described["paths"]["/scim/v2/Users"])
    assert {"get", "put", "patch", "delete"} <= set(described["paths"]["/scim/v2/Groups/{id}"])
    assert "get" in described["paths"]["/scim/v2/ServiceProviderConfig"]
    disabled = await (await (await client_for(new_kb())).get("/openapi.json")).json()
    assert not any(path.startswith("/scim") for path in disabled["paths"])
