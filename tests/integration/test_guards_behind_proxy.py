"""The client's address behind a proxy (issue 52, finding 8), on the real app: X-Forwarded-For (or RFC 7239
Forwarded) is read only when the connection comes from an address in `[server] trusted_proxies`, and then it is the
address the workbench's, the access view's and SCIM's guards count wrong keys against, and the one their log lines
name. A peer outside the list (or any peer with the default, empty list) is its own address, whatever it writes.

Connections come from 127.0.0.<n> (all of 127/8 is this machine's loopback); 127.0.0.1 plays the trusted proxy."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import aiohttp
import pytest
from helpers.scim_calls import TOKEN, auth
from helpers.setup import api_key

from es_provider.edge.guard import GUESSES_PER_ADDRESS
from es_provider.scim import service as scim

WB_KEY = "workbench-key-0123456789"
VIEW_KEY = "access-view-key-0123456789"
PROXY = {"trusted_proxies": ["127.0.0.1"]}


def from_address(last: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(f"127.0.0.{last}", 0)))


def wb(key: str = WB_KEY, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **more}


async def pages(client_for: Any, kb: Any, server: dict[str, Any] | None = None) -> Any:
    """The workbench, the access view and SCIM on one app (one Guard for both pages' keys, one for SCIM's)."""
    return await client_for(kb, server=server or {}, workbench={"enabled": True, "key_ref": "WB_KEY"},
                            access_log={"index": f"test-access-{uuid.uuid4().hex[:12]}", "view_key_ref": "VIEW_KEY"},
                            scim={"enabled": True, "token_ref": "SCIM_TOKEN"},
                            directory={"index": f"test-principals-{uuid.uuid4().hex}"},
                            env={"WB_KEY": WB_KEY, "VIEW_KEY": VIEW_KEY, "SCIM_TOKEN": TOKEN},
                            api_keys=[api_key([kb.id])])


def remotes(caplog: Any, logger: str, text: str) -> list[str]:
    return [r.remote for r in caplog.records if r.name == logger and text in r.getMessage()]


@pytest.mark.parametrize("server", [pytest.param({}, id="no-trusted-proxies"),
                                    pytest.param(PROXY, id="an-untrusted-peer")])
async def test_a_forwarded_address_from_an_untrusted_peer_is_ignored(client_for, kb, caplog, server) -> None:
    """A guesser writing a new X-Forwarded-For (and Forwarded) each time is still one address: its own."""
    caplog.set_level(logging.INFO)
    client = await pages(client_for, kb, server)
    async with from_address(7) as guesser:
        statuses = [(await guesser.get(client.make_url("/workbench/api/setup"), headers=wb(
            f"guess-{n}-0123456789", **{"X-Forwarded-For": f"198.51.100.{n}", "Forwarded": f"for=198.51.100.{n}"})))
            .status for n in range(GUESSES_PER_ADDRESS + 2)]
        scim_statuses = [(await guesser.get(client.make_url("/scim/v2/Users"), headers={
            **auth(f"wrong-{n:02d}-0123456789abcdef"), "X-Forwarded-For": f"198.51.100.{n}"})).status
            for n in range(scim.GUESSES_PER_ADDRESS + 1)]
    assert statuses == [401] * GUESSES_PER_ADDRESS + [429] * 2
    assert scim_statuses == [401] * scim.GUESSES_PER_ADDRESS + [429]
    assert set(remotes(caplog, "es_provider.workbench", "key refused")) == {"127.0.0.7"}
    assert set(remotes(caplog, "es_provider.scim", "refused")) == {"127.0.0.7"}


async def test_behind_a_trusted_proxy_each_client_is_locked_out_on_its_own(client_for, kb, caplog) -> None:
    caplog.set_level(logging.INFO)
    client = await pages(client_for, kb, PROXY)
    guesser, operator = {"X-Forwarded-For": "198.51.100.7"}, {"X-Forwarded-For": "203.0.113.5, 198.51.100.8"}
    statuses = [(await client.get("/workbench/api/setup", headers=wb(f"guess-{n}-0123456789", **guesser))).status
                for n in range(GUESSES_PER_ADDRESS + 1)]
    assert statuses == [401] * GUESSES_PER_ADDRESS + [429]
    # The workbench and the access view keep their lockout for the right key too (docs/workbench.md): the guesser's
    # own address waits; everybody else behind the same proxy does not.
    assert (await client.get("/workbench/api/setup", headers=wb(**guesser))).status == 429
    assert (await client.get("/workbench/access", headers=wb(VIEW_KEY, **guesser))).status == 429
    assert (await client.get("/workbench/api/setup", headers=wb(**operator))).status == 200
    assert (await client.get("/workbench/access", headers=wb(VIEW_KEY, **operator))).status == 200
    logged_in = await client.post("/workbench/access/login", data={"key": VIEW_KEY}, headers=operator,
                                  allow_redirects=False)
    assert logged_in.status == 303
    assert (await client.get("/workbench/api/setup", headers=wb("one-wrong-0123456789", **operator))).status == 401
    assert set(remotes(caplog, "es_provider.workbench", "key refused")) == {"198.51.100.7", "198.51.100.8"}
    assert remotes(caplog, "es_provider.workbench", "refused while locked out") == ["198.51.100.7"] * 3
    assert remotes(caplog, "es_provider.workbench", "access-view: login") == ["198.51.100.8"]

    # SCIM alike, and its right token is accepted even from the locked-out address.
    scim_statuses = [(await client.get("/scim/v2/Users", headers={**auth(f"wrong-{n:02d}-0123456789abcdef"),
                                                                  **guesser})).status
                     for n in range(scim.GUESSES_PER_ADDRESS + 1)]
    assert scim_statuses == [401] * scim.GUESSES_PER_ADDRESS + [429]
    assert (await client.get("/scim/v2/Users", headers={**auth("wrong-0123456789abcdef"), **operator})).status == 401
    assert (await client.get("/scim/v2/Users", headers={**auth(), **guesser})).status == 200
    assert set(remotes(caplog, "es_provider.scim", "refused")) == {"198.51.100.7", "198.51.100.8"}


async def test_forwarded_rfc_7239_when_the_proxies_write_it(client_for, kb, caplog) -> None:
    """With `forwarded_header = "Forwarded"`, its last hops are read (quoted IPv6 with a port here), and
    X-Forwarded-For — which such a proxy passes on as the client wrote it — is not."""
    caplog.set_level(logging.INFO)
    client = await pages(client_for, kb, {**PROXY, "forwarded_header": "Forwarded"})
    guesser = {"Forwarded": 'for=192.0.2.1;proto=https, For="[2001:DB8:cafe::17]:4711";by=_ingress',
               "X-Forwarded-For": "203.0.113.5"}
    statuses = [(await client.get("/workbench/api/setup", headers=wb(f"guess-{n}-0123456789", **guesser))).status
                for n in range(GUESSES_PER_ADDRESS + 1)]
    assert statuses == [401] * GUESSES_PER_ADDRESS + [429]
    other = {"Forwarded": "for=192.0.2.1", "X-Forwarded-For": "2001:db8:cafe::17"}
    assert (await client.get("/workbench/api/setup", headers=wb(**other))).status == 200
    assert set(remotes(caplog, "es_provider.workbench", "key refused")) == {"2001:db8:cafe::17"}
