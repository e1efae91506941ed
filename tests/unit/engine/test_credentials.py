"""Rotating the engine's credentials fails no request (engine/credentials.py, engine/connection.py): a username and
its password read together as one pair (Kubernetes' atomic swap, and a pair changed while it is being read), the
credential the engine refuses is never the only one tried (a 401 resends once with the other), a new one is kept
once the engine accepted it (and logged so: the operator's signal to revoke the old one), client certificate files
loaded again for new connections (test_connection.py); against a small engine stand-in that accepts a set of `Authorization` values the
test changes while calls run. The single-user, secret-first case is the procedure docs/cluster.md gave: it failed
every call between the file's change and the engine's (a 401 was resent only when the file changed again)."""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from helpers.projected_secret import ProjectedSecret

from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.secrets import read_secret_file
from es_provider.core.errors import KnowledgeError
from es_provider.engine import credentials
from es_provider.engine.base import EngineBase
from es_provider.engine.connection import from_settings
from es_provider.engine.credentials import (
    RotatingSecret,
    RotatingSecrets,
    api_key_auth,
    basic_auth,
    credential_used,
)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Stand:
    """An engine's HTTP side for these tests: `GET /` and any POST answer 200 to an accepted `Authorization`
    (compared in constant time), 401 as the security plugin words it to anything else."""

    def __init__(self, accepted: set[str]) -> None:
        self.accepted = accepted
        self.seen: list[tuple[str, int]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        given = request.headers.get("Authorization", "")
        if not any(hmac.compare_digest(given.encode(), key.encode()) for key in list(self.accepted)):
            self.seen.append((given, 401))
            return web.json_response({"error": {"type": "security_exception", "reason": "Unauthorized"},
                                      "status": 401}, status=401)
        self.seen.append((given, 200))
        return web.json_response({"version": {"number": "2.19.1", "distribution": "opensearch"},
                                  "hits": {"hits": []}})

    async def start(self) -> Stand:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The files looked at every 50 ms (1 s in service) and a refused new credential tried again after 0.5 s (5 s),
    so each case takes a second or two."""
    monkeypatch.setattr(credentials, "RECHECK_S", 0.05)
    monkeypatch.setattr(credentials, "RETRY_S", 0.5)


@pytest.fixture
async def stand() -> AsyncIterator[Stand]:
    running = await Stand(set()).start()
    yield running
    await running.close()


class Calls:
    """Engine calls from several tasks, both clients in turn (opensearch-py's `GET /`, the HTTP/1.1 client's POST),
    until stopped: each call's outcome kept."""

    def __init__(self, engine: EngineBase, tasks: int = 4) -> None:
        self.engine = engine
        self.outcomes: list[str] = []
        self._stop = asyncio.Event()
        self._tasks = [asyncio.create_task(self._run(i)) for i in range(tasks)]

    async def _run(self, turn: int) -> None:
        door = self.engine._http1
        while not self._stop.is_set():
            turn += 1
            try:
                if turn % 2:
                    await self.engine.info()
                else:
                    await self.engine._call(None, lambda left: door.post("/kb/_search", b"{}"))
                self.outcomes.append("ok")
            except KnowledgeError as exc:
                self.outcomes.append(f"failed: {exc.detail}")
            await asyncio.sleep(0.01)

    async def stop(self) -> list[str]:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self.engine.close()
        return self.outcomes


async def until(predicate: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(record.getMessage() for record in caplog.records)


def engine_for(stand: Stand, environ: dict[str, str], **keys: Any) -> EngineBase:
    connection = from_settings(OpenSearchSettings.model_validate({"url": stand.url, **keys}), environ)
    return EngineBase(connection, timeout_s=5)


# A user named by a secret


def test_username_ref_reads_the_user_from_a_secret(tmp_path: Path) -> None:
    secret = ProjectedSecret(tmp_path / "engine", {"username": "svc_a", "password": "pw-a"})
    connection = from_settings(OpenSearchSettings(url="https://es.corp", username_ref="U", password_ref="P"),
                               {"U_FILE": secret.path("username"), "P_FILE": secret.path("password")})
    assert connection.auth is not None
    assert connection.auth("GET", "https://es.corp/", None) == {"authorization": basic("svc_a", "pw-a")}
    assert connection.describe() == "https://es.corp (U, P, TLS)"
    assert "pw-a" not in repr(connection.auth)


# One secret: the headers it makes, a file re-read when it changes


def test_basic_and_api_key_headers() -> None:
    basic = basic_auth("svc", RotatingSecret("PW", {"PW": "p@ss:w0rd"}))
    assert basic("GET", "https://x/", None) == {
        "authorization": "Basic " + base64.b64encode(b"svc:p@ss:w0rd").decode()}
    assert api_key_auth(RotatingSecret("K", {"K": "id1:key1"}))("GET", "u", None) == {
        "authorization": "ApiKey " + base64.b64encode(b"id1:key1").decode()}
    assert api_key_auth(RotatingSecret("K", {"K": "aWQxOmtleTE="}))("GET", "u", None) == {
        "authorization": "ApiKey aWQxOmtleTE="}
    assert "p@ss" not in repr(basic) and "w0rd" not in repr(basic)


def test_a_secret_file_is_re_read_when_it_changes(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "pw"
    path.write_text("old\n")
    secret = RotatingSecret("PW", {"PW_FILE": str(path)}, clock=lambda: now[0])
    assert secret.value() == "old"
    replacement = tmp_path / "pw.new"
    replacement.write_text("new-one\n")
    os.replace(replacement, path)  # as a Kubernetes secret rotation swaps the file
    assert secret.value() == "old"  # looked at once a second at most
    now[0] = 1.5
    assert secret.value() == "new-one"
    path.unlink()  # a moment without the file keeps the last value
    now[0] = 3.0
    assert secret.value() == "new-one"


# Reading a pair


def test_a_projected_pair_changes_at_once(tmp_path: Path, quick: None) -> None:
    now = [0.0]
    secret = ProjectedSecret(tmp_path / "engine", {"username": "svc_a", "password": "pw-a"})
    pair = RotatingSecrets(("U", "P"), {"U_FILE": secret.path("username"), "P_FILE": secret.path("password")},
                           clock=lambda: now[0])
    assert pair.values() == ("svc_a", "pw-a")
    secret.write({"username": "svc_b", "password": "pw-b"})
    now[0] = 1.0
    assert pair.values() == ("svc_b", "pw-b")  # no loop here: read inline


def test_a_pair_swapped_while_being_read_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap lands between the username's read and the password's: that reading is not taken, the next one
    (both new) is. Never the new user with the old password."""
    now = [0.0]
    secret = ProjectedSecret(tmp_path / "engine", {"username": "svc_a", "password": "pw-a"})
    pair = RotatingSecrets(("U", "P"), {"U_FILE": secret.path("username"), "P_FILE": secret.path("password")},
                           clock=lambda: now[0])
    secret.write({"username": "svc_b", "password": "pw-b"})
    reads: list[str] = []

    def racing_read(path: str) -> str:
        value = read_secret_file(path)
        reads.append(value)
        if len(reads) == 1:  # the third rotation lands right after the first file of the set was read
            secret.write({"username": "svc_c", "password": "pw-c"})
        return value

    monkeypatch.setattr(credentials, "read_secret_file", racing_read)
    now[0] = 1.0
    assert pair.values() == ("svc_c", "pw-c")
    assert reads[:2] == ["svc_b", "pw-c"]  # the torn reading, thrown away


def test_a_file_that_cannot_be_taken_keeps_the_last_pair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    user, password = tmp_path / "user", tmp_path / "password"
    user.write_text("svc_a\n")
    password.write_text("pw-a\n")
    pair = RotatingSecrets(("U", "P"), {"U_FILE": str(user), "P_FILE": str(password)}, clock=lambda: now[0])
    password.unlink()
    os.mkfifo(password)  # would block a reader forever: refused, never waited on
    user.write_text("svc_b\n")
    with caplog.at_level(logging.WARNING, logger="es_provider.engine"):
        for second in (1.0, 2.0, 3.0):
            now[0] = second
            assert pair.values() == ("svc_a", "pw-a")
    assert logged(caplog).count("is not a regular file") == 1


# Which credential a request carries


def test_a_refused_new_credential_falls_back_and_is_tried_again_later() -> None:
    now = [0.0]
    environ = {"U": "svc_a", "P": "pw-a"}
    pair = RotatingSecrets(("U", "P"), environ)
    auth = basic_auth(None, pair)
    auth._clock = lambda: now[0]

    def send() -> str:
        return auth("GET", "u", None)["authorization"]

    assert send() == basic("svc_a", "pw-a")
    pair._values = ("svc_b", "pw-b")  # as a re-read leaves it
    assert send() == basic("svc_b", "pw-b")
    assert auth.refused() is True  # the engine does not know svc_b yet: resend with the one that worked
    assert send() == basic("svc_a", "pw-a")
    auth.accepted()  # an answer to the old one promotes nothing
    assert auth._good.label == "user svc_a"
    now[0] = credentials.RETRY_S
    assert send() == basic("svc_b", "pw-b")  # tried again, once the wait is over
    assert auth.refused() is True and send() == basic("svc_a", "pw-a")
    now[0] += credentials.RETRY_S  # the wait doubles
    assert send() == basic("svc_a", "pw-a")
    now[0] += credentials.RETRY_S
    assert send() == basic("svc_b", "pw-b")
    auth.accepted()
    assert auth._good.label == "user svc_b" and auth._fresh is None
    assert send() == basic("svc_b", "pw-b")
    assert auth.refused() is False  # no other credential at hand: the 401 stands


def test_no_new_credential_means_no_resend() -> None:
    auth = basic_auth("svc", RotatingSecrets(("P",), {"P": "pw-1"}))
    auth("GET", "u", None)
    assert auth.refused() is False
    credential_used.set(None)
    assert auth.refused() is False


def test_concurrent_refusals_of_the_new_credential_count_once() -> None:
    pair = RotatingSecrets(("P",), {"P": "pw-1"})
    auth = basic_auth("svc", pair)
    pair._values = ("pw-2",)
    auth("GET", "u", None)
    fresh = credential_used.get()
    for _ in range(5):  # five requests sent with it before the first 401 came back
        credential_used.set(fresh)
        assert auth.refused() is True
    assert auth._retry_s == 2 * credentials.RETRY_S


def test_the_working_credential_refused_moves_on_to_the_new_one() -> None:
    """The rotation's last step (the old user deleted) while the new one was refused a moment ago (made on the
    engine after its secret was written): the new one is tried at once, not after the wait."""
    pair = RotatingSecrets(("U", "P"), {"U": "svc_a", "P": "pw-a"})
    auth = basic_auth(None, pair)
    pair._values = ("svc_b", "pw-b")
    auth("GET", "u", None)
    assert auth.refused() is True
    assert auth("GET", "u", None)["authorization"] == basic("svc_a", "pw-a")
    assert auth.refused() is True
    assert auth("GET", "u", None)["authorization"] == basic("svc_b", "pw-b")


# Under calls, against the stand-in


async def test_one_users_password_written_first_then_changed_on_the_engine_fails_nothing(
        stand: Stand, tmp_path: Path, quick: None) -> None:
    """docs/cluster.md's procedure before (the file first, the engine after): the service read the new password,
    the engine refused it, and every call failed until the engine changed too."""
    stand.accepted = {basic("svc", "pw-1")}
    password = tmp_path / "password"
    password.write_text("pw-1\n")
    calls = Calls(engine_for(stand, {"PW_FILE": str(password)}, username="svc", password_ref="PW"))
    await asyncio.sleep(0.3)
    replacement = tmp_path / "password.new"
    replacement.write_text("pw-2\n")
    replacement.replace(password)
    await until(lambda: (basic("svc", "pw-2"), 401) in stand.seen)  # tried, refused
    await asyncio.sleep(0.3)
    stand.accepted = {basic("svc", "pw-2")}  # the engine's password changed: the old one refused at once
    await until(lambda: stand.seen[-1] == (basic("svc", "pw-2"), 200))
    await asyncio.sleep(0.3)
    outcomes = await calls.stop()
    assert [o for o in outcomes if o != "ok"] == [] and len(outcomes) > 50


@pytest.mark.parametrize("order", ["user made first", "secret written first", "files written one by one"])
async def test_a_rotation_to_a_second_user_fails_nothing(order: str, stand: Stand, tmp_path: Path, quick: None,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    old, new = basic("svc_a", "pw-a"), basic("svc_b", "pw-b")
    stand.accepted = {old}
    if order == "files written one by one":  # not a projected Secret: no atomic swap
        user, password = tmp_path / "user", tmp_path / "password"
        user.write_text("svc_a\n")
        password.write_text("pw-a\n")
        environ = {"U_FILE": str(user), "P_FILE": str(password)}
    else:
        secret = ProjectedSecret(tmp_path / "engine", {"username": "svc_a", "password": "pw-a"})
        environ = {"U_FILE": secret.path("username"), "P_FILE": secret.path("password")}
    caplog.set_level(logging.INFO, logger="es_provider.engine")
    calls = Calls(engine_for(stand, environ, username_ref="U", password_ref="P"))
    await asyncio.sleep(0.3)
    if order != "secret written first":
        stand.accepted.add(new)  # 1. user B made, with A's roles
    if order == "files written one by one":
        user.write_text("svc_b\n")  # 2. a torn pair for a while: svc_b with pw-a
        await asyncio.sleep(0.3)
        password.write_text("pw-b\n")
    else:
        secret.write({"username": "svc_b", "password": "pw-b"})  # 2. the Secret updated
    if order == "secret written first":
        await until(lambda: (new, 401) in stand.seen)
        await asyncio.sleep(0.2)
        stand.accepted.add(new)
    await until(lambda: "works and is in use (user svc_b)" in logged(caplog))  # 3. the service uses B
    stand.accepted.discard(old)  # 4. user A deleted
    await asyncio.sleep(0.5)
    outcomes = await calls.stop()
    assert [o for o in outcomes if o != "ok"] == [] and len(outcomes) > 50
    assert stand.seen[-1] == (new, 200)
    assert "pw-a" not in logged(caplog) and "pw-b" not in logged(caplog)


async def test_an_api_key_rotation_fails_nothing(stand: Stand, tmp_path: Path, quick: None,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    old, new = base64.b64encode(b"key-1:secret-1").decode(), "key-2:secret-2"
    stand.accepted = {f"ApiKey {old}"}
    secret = ProjectedSecret(tmp_path / "engine", {"api-key": old})
    caplog.set_level(logging.INFO, logger="es_provider.engine")
    calls = Calls(engine_for(stand, {"K_FILE": secret.path("api-key")}, api_key_ref="K"))
    await asyncio.sleep(0.3)
    stand.accepted.add("ApiKey " + base64.b64encode(new.encode()).decode())
    secret.write({"api-key": new})
    await until(lambda: "works and is in use (API key id key-2)" in logged(caplog))
    stand.accepted.discard(f"ApiKey {old}")
    await asyncio.sleep(0.5)
    outcomes = await calls.stop()
    assert [o for o in outcomes if o != "ok"] == [] and len(outcomes) > 50
    assert "secret-1" not in logged(caplog) and "secret-2" not in logged(caplog) and old not in logged(caplog)


async def test_both_refused_fails_after_one_resend(stand: Stand, tmp_path: Path, quick: None) -> None:
    secret = ProjectedSecret(tmp_path / "engine", {"username": "svc_a", "password": "pw-a"})
    stand.accepted = {basic("svc_a", "pw-a")}
    engine = engine_for(stand, {"U_FILE": secret.path("username"), "P_FILE": secret.path("password")},
                        username_ref="U", password_ref="P")
    await engine.info()
    secret.write({"username": "svc_b", "password": "pw-b"})
    stand.accepted = set()
    await asyncio.sleep(0.1)
    before = len(stand.seen)
    with pytest.raises(KnowledgeError) as caught:
        await engine.info()
    assert "401" in (caught.value.detail or "")
    assert len(stand.seen) - before == 2  # the new pair, then the old one: bounded
    await engine.close()
