"""The SCIM token (issue 37, finding 5; issue 52, finding 8): wrong tokens lock a client out (429 in SCIM's error
body, with Retry-After), but the right token is always accepted, from a locked-out address too; a short token, or
one equal in value to another credential of the service, stops the start, naming the variable and never the
value."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import orjson
import pytest
from helpers.scim_calls import ERROR, SCIM_TYPE, TOKEN, USER, auth, patch
from helpers.setup import API_KEY, CALLBACK_SECRET, TEST_ENV, api_key, new_kb, settings_for

from es_provider.core.errors import StartupError
from es_provider.scim import service as scim
from es_provider.web.app import create_app

WB_KEY = "workbench-key-0123456789"
VIEW_KEY = "access-view-key-0123456789"


async def test_wrong_tokens_lock_the_client_out_but_never_the_right_token(client_for, caplog) -> None:
    # Issue 52, finding 8: a locked-out address used to be refused the right token too, so anybody behind the same
    # ingress as the identity provider stopped provisioning with ten wrong tokens a minute.
    client = await client_for(new_kb(), env={"SCIM_TOKEN": TOKEN}, scim={"enabled": True, "token_ref": "SCIM_TOKEN"},
                              directory={"index": f"test-principals-{uuid.uuid4().hex}"})
    statuses = [(await client.get("/scim/v2/Users", headers=auth(f"wrong-{n:02d}-0123456789abcdef"))).status
                for n in range(scim.GUESSES_PER_ADDRESS)]
    assert statuses == [401] * scim.GUESSES_PER_ADDRESS
    with caplog.at_level(logging.INFO):
        for headers in (auth("wrong-again-0123456789abcdef"), {"Content-Type": SCIM_TYPE}):  # wrong, or none
            locked = await client.get("/scim/v2/Users", headers=headers)
            assert locked.status == 429
            assert locked.content_type == SCIM_TYPE
            assert 0 < int(locked.headers["Retry-After"]) <= 60
            body = await locked.json()
            assert body["schemas"] == [ERROR] and body["status"] == "429" and "retry later" in body["detail"]
        # The right token, from the same locked-out address: read, create, change — each accepted at once.
        assert (await client.get("/scim/v2/Users", headers=auth())).status == 200
        made = await client.post("/scim/v2/Users", headers=auth(), data=orjson.dumps(
            {"schemas": [USER], "userName": "u-locked-out-idp"}))
        assert made.status == 201, await made.text()
        changed = await client.patch(f"/scim/v2/Users/{(await made.json())['id']}", headers=auth(), data=patch(
            {"op": "replace", "path": "active", "value": False}))
        assert changed.status == 200, await changed.text()
        assert (await client.get("/scim/v2/Users", headers=auth("wrong-still-0123456789abcdef"))).status == 429
    scim_lines = [r for r in caplog.records if r.name == "es_provider.scim"]
    locked_lines = [r.getMessage() for r in scim_lines if "locked out" in r.getMessage()]
    assert len(locked_lines) == 3 and sum("no bearer token" in line for line in locked_lines) == 1, locked_lines
    assert all(getattr(r, "remote", None) == "127.0.0.1" for r in scim_lines if "refused" in r.getMessage())
    assert all(TOKEN not in r.getMessage() for r in caplog.records)


async def test_the_right_token_never_counts_against_the_client(client_for) -> None:
    client = await client_for(new_kb(), env={"SCIM_TOKEN": TOKEN}, scim={"enabled": True, "token_ref": "SCIM_TOKEN"},
                              directory={"index": f"test-principals-{uuid.uuid4().hex}"})
    for _ in range(3 * scim.GUESSES_PER_ADDRESS):
        assert (await client.get("/scim/v2/ServiceProviderConfig", headers=auth())).status == 200


def _settings(**sections: Any) -> Any:
    kb = new_kb()
    return settings_for("http://127.0.0.1:9200", kb, api_keys=[api_key([kb.id])],
                        scim={"enabled": True, "token_ref": "SCIM_TOKEN"}, **sections)


@pytest.mark.parametrize(("token", "sections", "refused"), [
    pytest.param("x", {}, "at least 16 characters", id="one-character"),
    pytest.param("fifteen-chars-x", {}, "at least 16 characters", id="fifteen-characters"),
    pytest.param(WB_KEY, {"workbench": {"enabled": True, "key_ref": "WB_KEY"}}, "workbench key",
                 id="the-workbench-key"),
    pytest.param(VIEW_KEY, {"access_log": {"view_key_ref": "VIEW_KEY"}}, "access view key",
                 id="the-access-view-key"),
    pytest.param(CALLBACK_SECRET, {}, "its own credential", id="a-callback-secret"),
    pytest.param(API_KEY, {}, "its own credential", id="an-api-key"),
])
def test_a_token_too_short_or_another_credential_stops_the_start(token, sections, refused) -> None:
    environ = {**TEST_ENV, "SCIM_TOKEN": token, "WB_KEY": WB_KEY, "VIEW_KEY": VIEW_KEY}
    with pytest.raises(StartupError, match=refused) as raised:
        create_app(_settings(**sections), environ=environ)
    assert "SCIM_TOKEN" in str(raised.value) and token not in str(raised.value)


def test_a_token_of_its_own_starts() -> None:
    environ = {**TEST_ENV, "SCIM_TOKEN": TOKEN, "WB_KEY": WB_KEY, "VIEW_KEY": VIEW_KEY}
    create_app(_settings(workbench={"enabled": True, "key_ref": "WB_KEY"}, access_log={"view_key_ref": "VIEW_KEY"}),
               environ=environ)

