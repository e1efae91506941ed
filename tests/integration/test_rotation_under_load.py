"""The rotation procedures of docs/cluster.md and docs/kubernetes.md, measured under load: SparkTide callbacks at 8 a
second and /readyz every 0.25 s through the whole procedure, the secrets in a folder laid out and swapped as the
kubelet projects a Secret (helpers/projected_secret.py). On the secure node (the real security plugin): basic auth
moving to a second engine user (username_ref + password_ref, one pair), one user's password changed secret-first
(the procedure the docs gave before, which failed every request between the two changes: 11 at 4 a second in the
issue), and a client certificate replaced by another from the same CA. Through the TLS front (the local nodes have
no API keys): an API key replaced by a second one, made first or after its secret. Each: 0 failed requests, /readyz
never 503, and the log line that tells the operator the new credential is in use."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import secrets
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers.calls import ask
from helpers.projected_secret import ProjectedSecret
from helpers.secure_node import (
    ROLE_OF,
    default_roles,
    engine_as,
    issue_client_certificate,
    put_role,
    put_role_mapping,
    put_user,
    request,
    security_api,
)
from helpers.setup import load_records, new_kb

from es_provider.ingest import admin
from es_provider.web.state import ENGINE
from harness.tls_front import Certificates, TlsFront

RATE = 8.0  # SparkTide requests a second, each on its own (a slow one does not slow the next)
RECORD = {"document_id": "rotation-1", "title": "Rotation", "content": "installation during a rotation",
          "source": {"type": "DOCUMENT", "id": "rotation-1", "version": "v1"}, "acl": {"public": True},
          "tenant_id": "team-a"}


class Load:
    """SparkTide callbacks at RATE a second and /readyz every 0.25 s, from `start` to `stop`: every status kept."""

    def __init__(self, served: Any) -> None:
        self.served = served
        self.answers: list[int | str] = []
        self.ready: list[int] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.started = 0.0

    def start(self) -> Load:
        self.started = time.monotonic()
        self._tasks = [asyncio.create_task(self._ask()), asyncio.create_task(self._probe())]
        return self

    @classmethod
    async def on(cls, served: Any) -> Load:
        """Started once /readyz answers 200, and run 2 s before the procedure begins."""
        assert (await served.get("/readyz")).status == 200
        load = cls(served).start()
        await asyncio.sleep(2)
        return load

    async def _ask(self) -> None:
        pending: list[asyncio.Task[None]] = []
        while not self._stop.is_set():
            pending.append(asyncio.create_task(self._one()))
            await asyncio.sleep(1 / RATE)
        await asyncio.gather(*pending)

    async def _one(self) -> None:
        try:
            status, answer = await ask(self.served)
            ok = status == 200 and [item["documentId"] for item in answer["items"]] == ["rotation-1"]
            self.answers.append(200 if ok else status if status != 200 else "wrong answer")
        except Exception as exc:
            self.answers.append(type(exc).__name__)

    async def _probe(self) -> None:
        while not self._stop.is_set():
            self.ready.append((await self.served.get("/readyz")).status)
            await asyncio.sleep(0.25)

    async def stop(self) -> str:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        failed = [answer for answer in self.answers if answer != 200]
        return (f"{len(self.answers)} requests in {time.monotonic() - self.started:.1f} s, {len(failed)} failed "
                f"{failed[:5]}; /readyz {len(self.ready)} probes, {sum(s != 200 for s in self.ready)} not 200")

    def assert_nothing_failed(self) -> None:
        assert [answer for answer in self.answers if answer != 200] == [], self.answers
        assert set(self.ready) == {200}, self.ready
        assert len(self.answers) >= 5 * RATE

    async def finish(self, caplog: pytest.LogCaptureFixture, what: str, *secret_values: str, note: str = "") -> None:
        """Stopped, its summary printed (`what: summary; note`); nothing failed and no secret logged."""
        summary = await self.stop()
        print(f"\n{what}: {summary}" + (f"; {note}" if note else ""))
        self.assert_nothing_failed()
        no_secret_logged(caplog, *secret_values)


async def logged(caplog: pytest.LogCaptureFixture, text: str, seconds: float = 30.0) -> float:
    """Waits for a log line holding `text`; how long it took."""
    started = time.monotonic()
    while not any(text in record.getMessage() for record in caplog.records):
        assert time.monotonic() - started < seconds, f"no log line with {text!r}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def no_secret_logged(caplog: pytest.LogCaptureFixture, *values: str) -> None:
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert all(value not in text for value in values)
    assert "PRIVATE KEY" not in text


def cluster(node: Any, **keys: Any) -> dict[str, Any]:
    return {"url": node.url, "ca_file": str(node.ca_file), **keys}


@pytest.fixture
async def rotation_kb(secure_opensearch: Any) -> AsyncIterator[Any]:
    async with engine_as(secure_opensearch, "ingest_user") as engine:
        kb = new_kb(alias=f"kb-rotation-{uuid.uuid4().hex}")
        await admin.create(engine, kb, admin.load_index_body())
        await load_records(engine, kb, [RECORD])
        yield kb
        await admin.drop(engine, kb)


@pytest.fixture
async def serve_roles(secure_opensearch: Any) -> AsyncIterator[Any]:
    """`grant(users=(), backend_roles=())`: the serve and access duties' roles (as documented), copies of this
    test's own, mapped to these users (made or not) and backend roles: the shared users' mappings are never
    touched."""
    node = secure_opensearch
    tag = uuid.uuid4().hex[:8]
    roles = [f"tmp_rotation_{duty}_{tag}" for duty in ("serve", "access")]

    async def grant(users: tuple[str, ...] = (), backend_roles: tuple[str, ...] = ()) -> None:
        for role, duty in zip(roles, ("serve", "access"), strict=True):
            await asyncio.to_thread(put_role, node, role, default_roles()[ROLE_OF[f"{duty}_user"]])
            await asyncio.to_thread(put_role_mapping, node, role, list(users), list(backend_roles))

    yield grant
    for role in roles:
        for kind in ("rolesmapping", "roles"):
            with contextlib.suppress(RuntimeError):
                await asyncio.to_thread(security_api, node, "DELETE", kind, role)


async def drop_access_record(node: Any, prefix: str) -> None:
    async with engine_as(node) as engine:
        await engine.delete_index(f"{prefix}-*")


async def drop_user(node: Any, user: str) -> None:
    with contextlib.suppress(RuntimeError):  # already deleted by the procedure
        await asyncio.to_thread(security_api, node, "DELETE", "internalusers", user)


async def test_basic_auth_moves_to_a_second_user_failing_nothing(secure_opensearch, rotation_kb, serve_roles,
                                                                 client_for, tmp_path, caplog) -> None:
    """docs/cluster.md's procedure: user B made with A's roles, B's name and password written to the Secret (one
    swap), the log says B is in use, user A deleted. Fails on the old code: it has no username_ref."""
    node = secure_opensearch
    tag = uuid.uuid4().hex[:8]
    (user_a, password_a), (user_b, password_b) = ((f"rot_{n}_{tag}", secrets.token_urlsafe(18)) for n in "ab")
    backend_role = f"rotation_{tag}"  # the duty's roles mapped to a backend role: a new user carries it
    await serve_roles(backend_roles=(backend_role,))
    await asyncio.to_thread(put_user, node, user_a, password_a, backend_roles=[backend_role])
    secret = ProjectedSecret(tmp_path / "engine", {"username": user_a, "password": password_a})
    caplog.set_level(logging.INFO, logger="es_provider.engine")
    served = await client_for(rotation_kb, env={"ES_USER_FILE": secret.path("username"),
                                                "ES_PASSWORD_FILE": secret.path("password")},
                              opensearch=cluster(node, username_ref="ES_USER", password_ref="ES_PASSWORD"),
                              access_log={"index": f"es-provider-access-rot-{tag}", "flush_interval_s": 0.1})
    try:
        load = await Load.on(served)
        await asyncio.to_thread(put_user, node, user_b, password_b, backend_roles=[backend_role])  # 1. user B
        secret.write({"username": user_b, "password": password_b})  # 2. the Secret: B's name and password
        in_use = await logged(caplog, f"works and is in use (user {user_b})")  # 3. the service uses B
        await drop_user(node, user_a)  # 4. user A deleted
        await asyncio.sleep(3)
        await load.finish(caplog, "basic, second user", password_a, password_b,
                          note=f"B in use {in_use:.2f} s after the Secret changed")
    finally:
        for user in (user_a, user_b):
            await drop_user(node, user)
        await drop_access_record(node, f"es-provider-access-rot-{tag}")


async def test_one_users_password_changed_secret_first_fails_nothing(secure_opensearch, rotation_kb, serve_roles,
                                                                    client_for, tmp_path, caplog) -> None:
    """The procedure the docs gave before (the new password written to the file first, the engine's changed
    after): on the old code every request between the two changes failed (the service sent only the new password,
    which the engine refused, and resent a 401 only when the file changed again). Now the one that worked serves
    until the engine takes the new one. Timed by the clock, not the new log lines, so it runs on the old code."""
    node = secure_opensearch
    tag = uuid.uuid4().hex[:8]
    user, old, new = f"rot_c_{tag}", secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    await serve_roles(users=(user,))
    await asyncio.to_thread(put_user, node, user, old)
    password = tmp_path / "password"
    password.write_text(old + "\n")
    caplog.set_level(logging.INFO, logger="es_provider.engine")
    served = await client_for(rotation_kb, env={"ES_PASSWORD_FILE": str(password)},
                              opensearch=cluster(node, username=user, password_ref="ES_PASSWORD"),
                              access_log={"index": f"es-provider-access-rot-{tag}", "flush_interval_s": 0.1})
    try:
        load = await Load.on(served)
        replacement = tmp_path / "password.new"
        replacement.write_text(new + "\n")
        replacement.replace(password)  # 1. the secret first
        await asyncio.sleep(4)  # read within a second: the engine refuses it, the old one keeps serving
        await asyncio.to_thread(put_user, node, user, new)  # 2. the engine's password changed (PUT replaces)
        await asyncio.sleep(4)
        await load.finish(caplog, "basic, one user, secret first", old, new)
    finally:
        await drop_user(node, user)
        await drop_access_record(node, f"es-provider-access-rot-{tag}")


async def test_a_client_certificate_rotation_fails_nothing(secure_opensearch, rotation_kb, serve_roles, client_for,
                                                           tmp_path, caplog) -> None:
    """A second certificate from the same CA whose user (its CN) the node maps to the serve and access roles, as
    it maps the first: written over the first (tls.crt and tls.key in one swap); new connections present it."""
    node = secure_opensearch
    tag = uuid.uuid4().hex[:8]
    name = f"rot_cert_{tag}"
    await serve_roles(users=(name,))  # the clientcert domain's user is the CN: mapped by name
    cert, key = issue_client_certificate(node, name, tmp_path / "issued")
    secret = ProjectedSecret(tmp_path / "tls", {"tls.crt": node.client_cert.read_text(),
                                                "tls.key": node.client_key.read_text()})
    caplog.set_level(logging.INFO, logger="es_provider.engine")
    served = await client_for(rotation_kb, opensearch=cluster(node, client_cert_file=secret.path("tls.crt"),
                                                              client_key_file=secret.path("tls.key")),
                              access_log={"index": f"es-provider-access-rot-{tag}", "flush_interval_s": 0.1})
    try:
        load = await Load.on(served)
        secret.write({"tls.crt": cert.read_text(), "tls.key": key.read_text()})
        fingerprint = hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert.read_text())).hexdigest()
        in_use = await logged(caplog, f"present the certificate with SHA-256 {fingerprint}")
        # A new connection from the service's own context (both its clients open theirs from it) is the new user.
        context = served.server.app[ENGINE].connection.tls
        status, info = await asyncio.to_thread(request, node, "GET", "/_plugins/_security/authinfo",
                                               context=context)
        assert status == 200 and info["user_name"] == name
        await asyncio.sleep(3)
        await load.finish(caplog, "client certificate",
                          note=f"new connections present it {in_use:.2f} s after the Secret changed")
    finally:
        await drop_access_record(node, f"es-provider-access-rot-{tag}")


KEY_1, KEY_2 = "rot-key-1:" + secrets.token_urlsafe(16), "rot-key-2:" + secrets.token_urlsafe(16)


def api_key(value: str) -> str:
    return "ApiKey " + base64.b64encode(value.encode()).decode()


@pytest.mark.parametrize("order", ["key made first", "secret written first"])
async def test_an_api_key_rotation_fails_nothing(order, opensearch, engine, client_for, tmp_path, caplog) -> None:
    """Elasticsearch holds several API keys at once: key 2 made (the front accepts it), the Secret written, the
    log says key 2 is in use, key 1 invalidated (the front refuses it). Or the Secret first: key 2 is refused,
    key 1 keeps serving, and key 2 is taken once it exists."""
    front = await TlsFront(opensearch.url, Certificates(tmp_path / "tls"), accepted={api_key(KEY_1)}).start()
    kb = new_kb()
    await admin.create(engine, kb, admin.load_index_body())
    await load_records(engine, kb, [RECORD])
    secret = ProjectedSecret(tmp_path / "engine", {"api-key": KEY_1})
    caplog.set_level(logging.INFO, logger="es_provider.engine")
    try:
        served = await client_for(kb, env={"ES_API_KEY_FILE": secret.path("api-key")},
                                  opensearch={"url": front.url, "ca_file": front.certificates.ca_file,
                                              "api_key_ref": "ES_API_KEY"})
        load = await Load.on(served)
        if order == "key made first":
            front.accepted.add(api_key(KEY_2))
        secret.write({"api-key": KEY_2})
        if order == "secret written first":
            await logged(caplog, "the engine refused the new one")
            await asyncio.sleep(2)
            front.accepted.add(api_key(KEY_2))
        in_use = await logged(caplog, "works and is in use (API key id rot-key-2)")
        front.accepted.discard(api_key(KEY_1))
        await asyncio.sleep(3)
        await load.finish(caplog, f"API key, {order}", KEY_1.split(":")[1], KEY_2.split(":")[1],
                          note=f"key 2 in use {in_use:.2f} s after "
                          f"{'the Secret changed' if order == 'key made first' else 'the first refusal was logged'}")
    finally:
        await front.close()
        await admin.drop(engine, kb)
