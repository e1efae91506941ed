"""Shared fixtures. Integration tests run against a REAL engine node and never skip. OpenSearch (the default): the
session picks 1. OPENSEARCH_URL, 2. a testcontainers OpenSearch when a Docker engine answers, 3. scripts/opensearch-local.
With ES_PROVIDER_ENGINE=elasticsearch (or elasticsearch9): 1. ELASTICSEARCH_URL, 2. scripts/elasticsearch-local
(--version 8 or 9). If none gives a healthy node, every integration test fails. (The fixture keeps its name,
`opensearch`: it is the engine node, whichever engine it is.)

`secure_opensearch` is a second OpenSearch, with the security plugin on (TLS, internal users, client certificates),
on port 9230 (ES_PROVIDER_TEST_SECURE_PORT): started by the first test that asks for it (tests/helpers/secure_node.py,
certificates and users kept in ~/.cache/es-provider/secure-certs), shared by every pytest-xdist process, and stopped
by the controlling process at the end if this run started it. It does not skip either: it fails."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.setup import E5, ROOT, TEST_ENV, new_kb, settings_for, vector_kb

from es_provider.config.knowledge import KnowledgeBase
from es_provider.engine.client import Engine
from es_provider.ingest import admin

LOCAL = ROOT / "scripts" / "opensearch-local"
TEST_PORT = os.environ.get("ES_PROVIDER_TEST_PORT", "9200")
OPENSEARCH_IMAGE = "opensearchproject/opensearch:2.19.1"


def _get(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _docker_engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class OpenSearchNode:
    def __init__(self, url: str, how: str, version: str, plugins: list[str]) -> None:
        self.url = url
        self.how = how
        self.version = version
        self.plugins = plugins
        self.name = "OpenSearch"


ENGINE = os.environ.get("ES_PROVIDER_ENGINE", "opensearch")
ES_LOCAL = ROOT / "scripts" / "elasticsearch-local"
ES_TEST_PORT = os.environ.get("ES_PROVIDER_TEST_ES_PORT", "9201")
URL_VARIABLE = "ELASTICSEARCH_URL" if ENGINE.startswith("elasticsearch") else "OPENSEARCH_URL"
HOW_VARIABLE = "ES_PROVIDER_TEST_NODE_HOW"  # how this run's controlling process found the node (for its report)
FAILED_VARIABLE = "ES_PROVIDER_TEST_NODE_FAILED"  # why it could not (every integration test then fails with it)


def _start_local(script: Path, port_variable: str, port: str, *args: str) -> tuple[str, str, Any]:
    """A node from one of the project's scripts on `port`; stopped at the end only if this run started it."""
    env = {**os.environ, port_variable: port}
    how = f"scripts/{script.name}"
    already = subprocess.run([str(script), "status"], env=env, capture_output=True).returncode == 0
    started = subprocess.run([str(script), "start", *args], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        raise RuntimeError(f"{how} start failed:\n{started.stderr[-4000:]}")
    stop = None
    if not already and not os.environ.get("ES_PROVIDER_KEEP_OPENSEARCH"):
        stop = lambda: subprocess.run([str(script), "stop"], env=env, capture_output=True)  # noqa: E731
    return started.stdout.strip().splitlines()[-1], how, stop


def _start_elasticsearch() -> tuple[str, str, Any]:
    return _start_local(ES_LOCAL, "ELASTICSEARCH_PORT", ES_TEST_PORT, "--version",
                        "9" if ENGINE == "elasticsearch9" else "8")


def _start_opensearch() -> tuple[str, str, Any]:
    if _docker_engine_answers():
        from testcontainers.opensearch import OpenSearchContainer

        container = OpenSearchContainer(OPENSEARCH_IMAGE, security_enabled=False).start()
        url = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(9200)}"
        return url, "testcontainers", container.stop
    return _start_local(LOCAL, "OPENSEARCH_PORT", TEST_PORT)


STOP_KEY = pytest.StashKey[Any]()
# The file whichever process starts the secure node writes, so the controlling process knows to stop it at the end.
SECURE_STARTED_VARIABLE = "ES_PROVIDER_TEST_SECURE_STARTED"
SECURE_STARTED_KEY = pytest.StashKey[Path]()


def _only_unit_tests(config: pytest.Config) -> bool:
    """Only tests/unit and tests/repo (the repository's own checks) were asked for: neither needs an engine."""
    engineless = (ROOT / "tests" / "unit", ROOT / "tests" / "repo")
    return bool(config.args) and all(any(Path(str(arg).split("::")[0]).resolve().is_relative_to(folder)
                                         for folder in engineless) for arg in config.args)


def pytest_configure(config: pytest.Config) -> None:
    """The engine node is found or started ONCE per run, by the controlling process: before pytest-xdist starts its
    workers, which find it through the environment (OPENSEARCH_URL / ELASTICSEARCH_URL); this process stops it at
    the end if it started it. A unit-only run starts nothing. A node that cannot be had is not an error here: every
    integration test then fails, naming why. (The secure node is started later, by the first test that needs it.)"""
    if not hasattr(config, "workerinput") and not os.environ.get(SECURE_STARTED_VARIABLE):
        marker = Path(tempfile.gettempdir()) / f"es-provider-secure-started-{os.getpid()}-{uuid.uuid4().hex}"
        os.environ[SECURE_STARTED_VARIABLE] = str(marker)
        config.stash[SECURE_STARTED_KEY] = marker
    if hasattr(config, "workerinput") or _only_unit_tests(config) or os.environ.get(URL_VARIABLE):
        return
    try:
        url, how, stop = _start_elasticsearch() if ENGINE.startswith("elasticsearch") else _start_opensearch()
    except RuntimeError as exc:
        os.environ[FAILED_VARIABLE] = str(exc)
        return
    os.environ[URL_VARIABLE] = url.rstrip("/")
    os.environ[HOW_VARIABLE] = how
    config.stash[STOP_KEY] = stop


def pytest_unconfigure(config: pytest.Config) -> None:
    stop = config.stash.get(STOP_KEY, None)
    if stop is not None:
        stop()
    marker = config.stash.get(SECURE_STARTED_KEY, None)
    if marker is not None and marker.exists():
        marker.unlink()
        if not os.environ.get("ES_PROVIDER_KEEP_OPENSEARCH"):
            from helpers.secure_node import SECURE_PORT, stop_secure_node

            stop_secure_node(SECURE_PORT)


@pytest.fixture(scope="session")
def secure_opensearch() -> Any:
    """The secure node (helpers.secure_node.SecureNode): url, port, ca_file, admin_cert, admin_key, passwords (user →
    password: admin_user, serve_user, ingest_user, directory_user, access_user), client_user, client_cert,
    client_key, wrong_ca_file, wrong_client_cert, wrong_client_key, directory, security_dir; ssl_context(),
    admin_context(), client_context(). Found running or started; a failure to start fails the test."""
    from helpers import secure_node

    try:
        node = secure_node.start_secure_node(secure_node.prepare())
    except Exception as exc:  # a node we cannot have is a failure, never a skip
        pytest.fail(f"no secure OpenSearch on port {secure_node.SECURE_PORT}: {exc}", pytrace=False)
    marker = os.environ.get(SECURE_STARTED_VARIABLE)
    if node.started and marker:
        Path(marker).touch()
    return node


@pytest.fixture(scope="session")
def opensearch(request: pytest.FixtureRequest) -> Iterator[OpenSearchNode]:
    if os.environ.get(FAILED_VARIABLE):
        pytest.fail(os.environ[FAILED_VARIABLE], pytrace=False)
    url = os.environ.get(URL_VARIABLE, "").rstrip("/")
    how = os.environ.get(HOW_VARIABLE, URL_VARIABLE)
    if not url:  # a unit-only run that collected an integration test after all
        pytest.fail(f"no engine node: set {URL_VARIABLE}, or run the integration tests so one is started",
                    pytrace=False)
    try:
        info = _get(url)
        plugins = [line.split()[1] for line in urllib.request.urlopen(f"{url}/_cat/plugins").read().decode().splitlines()]
    except Exception as exc:  # a node we cannot talk to is a failure, never a skip
        pytest.fail(f"the engine at {url} ({how}) does not answer: {exc}", pytrace=False)
    node = OpenSearchNode(url, how, info["version"]["number"], plugins)
    node.name = "OpenSearch" if info["version"].get("distribution") == "opensearch" else "Elasticsearch"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"{node.name} {node.version} at {url} via {how}; plugins: {', '.join(plugins) or 'none'}")
    request.config.stash[NODE_KEY] = node
    yield node


NODE_KEY = pytest.StashKey[OpenSearchNode]()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    node = config.stash.get(NODE_KEY, None)
    if node is not None:
        terminalreporter.write_line(f"integration tests ran against {node.name} {node.version} ({node.how}, {node.url})")
    elif STOP_KEY in config.stash or os.environ.get(HOW_VARIABLE):  # the controller of a pytest-xdist run
        terminalreporter.write_line(f"integration tests ran against the node at {os.environ.get(URL_VARIABLE)} "
                                    f"({os.environ.get(HOW_VARIABLE, URL_VARIABLE)})")


@pytest.fixture
async def engine(opensearch: OpenSearchNode) -> AsyncIterator[Engine]:
    engine = Engine(opensearch.url, timeout_s=30)
    yield engine
    await engine.close()


@pytest.fixture
async def store(engine: Engine) -> AsyncIterator[str]:
    """A principal store index of its own (the SCIM tests' [directory] index), dropped afterwards."""
    index = f"test-principals-{uuid.uuid4().hex}"
    yield index
    if await engine.index_exists(index):
        await engine.delete_index(index)


@pytest.fixture
async def kb(engine: Engine) -> AsyncIterator[KnowledgeBase]:
    definition = new_kb()
    await admin.create(engine, definition, admin.load_index_body())
    yield definition
    await admin.drop(engine, definition)


@pytest.fixture
async def e5() -> AsyncIterator[Any]:
    from es_provider.config.knowledge import EmbedderSettings
    from es_provider.search import embedders

    model = embedders.build(EmbedderSettings.model_validate(E5), {})
    yield model
    await model.close()


@pytest.fixture
async def vkb(engine: Engine) -> AsyncIterator[KnowledgeBase]:
    """A hybrid knowledge base whose index has the vector field."""
    definition = vector_kb()
    await admin.create(engine, definition, admin.load_index_body(dimensions=384))
    yield definition
    await admin.drop(engine, definition)


@pytest.fixture
async def client_for(opensearch: OpenSearchNode) -> AsyncIterator[Any]:
    """Builds the real app (create_app) on a real port for the given knowledge bases, and cleans up."""
    from aiohttp.test_utils import TestClient, TestServer

    from es_provider.web.app import create_app

    clients: list[TestClient[Any, Any]] = []

    async def make(*kbs: KnowledgeBase, url: str | None = None, env: dict[str, str] | None = None,
                   **overrides: Any) -> TestClient[Any, Any]:
        app = create_app(settings_for(url or opensearch.url, *kbs, **overrides), environ={**TEST_ENV, **(env or {})})
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def proxy(opensearch: OpenSearchNode) -> AsyncIterator[Any]:
    """An EngineProxy in front of the real node (tests/proxy.py)."""
    from harness.proxy import EngineProxy

    running = await EngineProxy(opensearch.url).start()
    yield running
    await running.close()


FIGURES_KEY = pytest.StashKey[dict[str, list[str]]]()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Any:
    """Records a reliability figure (`figures("part", "text")`); `make reliability` writes them to docs/reliability.md."""
    store = request.config.stash.setdefault(FIGURES_KEY, {})

    def record(part: str, text: str) -> None:
        store.setdefault(part, []).append(text)

    return record


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("ES_PROVIDER_RELIABILITY_REPORT")
    store = session.config.stash.get(FIGURES_KEY, {})
    if not target or not store:
        return
    node = session.config.stash.get(NODE_KEY, None)
    lines = ["# Reliability and security", "",
             "Written by `make reliability` (the reliability test modules with `ES_PROVIDER_HEAVY=1`: bigger corpus, "
             "more identities, longer soak) against a real OpenSearch"
             + (f" {node.version} ({node.how})" if node else "") + f"; pytest exit status {exitstatus} "
             f"({'all passed' if exitstatus == 0 else 'FAILURES: see the run'}). `make test` runs the same modules "
             "at CI size.", ""]
    def number(part: str) -> tuple[int, str]:  # "10. …" after "9. …"
        head = part.split(".", 1)[0]
        return (int(head) if head.isdigit() else 999, part)

    for part in sorted(store, key=number):
        lines += [f"## {part}", ""] + [f"- {text}" for text in store[part]] + [""]
    Path(target).write_text("\n".join(lines), encoding="utf-8")


# The marks are written on the tests themselves, each with its reason beside it: `timing` (assertions about time:
# linearity, cancellation within seconds, starvation, deadlines, soak ceilings; `make test` runs them alone, after
# the parallel run, so other tests' load cannot fail them), `engines` (what differs by engine, run again on
# Elasticsearch 9: the dialect, the core-API and by-query write paths, analyzers and scores, mappings, the cost of
# pattern searches) and `es8` (the part of it Elasticsearch 8 runs too). `grep -rn "mark.engines" tests` lists them.

# The slowest modules (seconds in 4 processes on 2 cores, 12-02), run first: pytest-xdist hands out whole modules
# (--dist loadfile) in collection order, so a slow module collected last ran on alone at the end (about 40 s).
SLOW_FIRST = tuple(f"tests/integration/test_{name}.py" for name in (
    "scim", "scim_conformance", "ingest_sync", "ingest_sync_interrupted", "agentarts", "reliability_isolation", "workers", "reliability_operations", "dify",
    "reliability_reindex", "workbench_browser", "principals_cli", "ingest_lifecycle", "reliability_vector",
    "vector_operations", "reliability_hostile_ingest", "live_identities", "sparktide_answers", "access_record"))


def _slow_first(item: pytest.Item) -> int:
    module = item.nodeid.split("::", 1)[0]
    return SLOW_FIRST.index(module) if module in SLOW_FIRST else len(SLOW_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Puts the slowest modules first (a stable sort keeps each module's own order) and holds that Elasticsearch 8
    runs a part of what 9 runs (an `es8` test is an `engines` test). scim2-server's storage contract
    (test_scim_conformance.py) also tests cursor paging, which the SCIM service does not offer (its configuration
    announces none): those tests are deselected rather than left to skip, so a skipped test always means one that
    should have run."""
    items.sort(key=_slow_first)
    only_8 = [item.nodeid for item in items
              if item.get_closest_marker("es8") and not item.get_closest_marker("engines")]
    if only_8:
        raise pytest.UsageError(f"es8 without engines (Elasticsearch 8 runs a part of what 9 runs): {only_8}")
    unoffered = [item for item in items
                 if "TestDirectoryStorageContract" in item.nodeid and item.name.startswith("test_cursor")]
    if unoffered:
        config.hook.pytest_deselected(items=unoffered)
        items[:] = [item for item in items if item not in unoffered]


# The Keycloak of the MCP endpoint's OAuth tests (scripts/keycloak-local, tests/helpers/keycloak.py), the secure
# node's way: started by the first test that asks for it, shared by every pytest-xdist process, and stopped by the
# controlling process at the end if this run started it. The controller names a marker file in the environment
# before the workers start (xdist starts them in its own, later, pytest_sessionstart); whichever process starts
# Keycloak creates the file.
KEYCLOAK_STARTED_VARIABLE = "ES_PROVIDER_TEST_KEYCLOAK_STARTED"


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput") or os.environ.get(KEYCLOAK_STARTED_VARIABLE):
        return
    marker = Path(tempfile.gettempdir()) / f"es-provider-keycloak-started-{os.getpid()}-{uuid.uuid4().hex}"
    os.environ[KEYCLOAK_STARTED_VARIABLE] = str(marker)

    def stop_if_started() -> None:
        if marker.exists():
            marker.unlink()
            if not os.environ.get("ES_PROVIDER_KEEP_KEYCLOAK"):
                from helpers.keycloak import stop_keycloak

                stop_keycloak()

    session.config.add_cleanup(stop_if_started)


@pytest.fixture(scope="session")
def keycloak() -> Any:
    """The running Keycloak (helpers.keycloak.Keycloak: url, admin password, admin REST calls) on port 18080
    (KEYCLOAK_PORT). Found running or started; a failure to start fails the test."""
    from helpers import keycloak as kc

    try:
        server, started = kc.start_keycloak()
    except Exception as exc:  # a Keycloak we cannot have is a failure, never a skip
        pytest.fail(f"no Keycloak on port {kc.PORT}: {exc}", pytrace=False)
    marker = os.environ.get(KEYCLOAK_STARTED_VARIABLE)
    if started and marker:
        Path(marker).touch()
    return server


@pytest.fixture
async def issuer() -> AsyncIterator[Any]:
    """A small OAuth issuer of the tests' own on the loopback address (harness/issuer.py): discovery, JWKS,
    introspection, tokens minted at will (helpers/local_issuer.py adds the forgeries the attacks need)."""
    from helpers.local_issuer import LocalIssuer

    found = await LocalIssuer().start()
    yield found
    await found.close()
