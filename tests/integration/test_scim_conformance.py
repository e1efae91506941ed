"""The SCIM 2.0 service held to the suites written for SCIM by others, on a real node: scim2-tester's every check
against the real served service, and scim2-server's storage contract for DirectoryStorage. The service's own rules
(its token, what Okta and Entra ID send, the store's documents) are in test_scim.py."""

from __future__ import annotations

import asyncio
import collections
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.scim_calls import TOKEN
from helpers.served import Served, write_config
from helpers.setup import TEST_ENV
from scim2_server.testing import AsyncScimStorageContract, BlockingStorage

from es_provider.engine.client import Engine
from es_provider.scim import service as scim
from es_provider.scim.storage import DirectoryStorage

# --- scim2-tester: every check, against the real `es-provider serve` ---


def test_scim2_tester_passes_every_check_against_the_served_service(opensearch, tmp_path: Path, capsys) -> None:
    import httpx2
    from scim2_client.engines.httpx2 import SyncSCIMClient
    from scim2_tester import Status, check_server

    index = f"test-principals-{uuid.uuid4().hex}"
    config = write_config(tmp_path / "config.toml", opensearch.url, [], sections={
        "scim": {"enabled": True, "token_ref": "SCIM_TOKEN"}, "directory": {"index": index}})
    served = Served(config, {**TEST_ENV, "SCIM_TOKEN": TOKEN}, tmp_path / "service.log")
    try:
        client = SyncSCIMClient(httpx2.Client(base_url=f"{served.base}/scim/v2", headers={
            "Authorization": f"Bearer {TOKEN}"}, timeout=30))
        results = check_server(client, raise_exceptions=False)
    finally:
        served.stop()
        urllib.request.urlopen(urllib.request.Request(f"{opensearch.url}/{index}", method="DELETE"))
    counts = collections.Counter(result.status.name for result in results)
    with capsys.disabled():
        print(f"\nscim2-tester: {len(results)} checks: {dict(counts)}")
    failed = [(r.status.name, r.resource_type, r.title, r.reason) for r in results
              if r.status in (Status.ERROR, Status.CRITICAL, Status.DEVIATION, Status.SKIPPED)]
    assert failed == [], failed
    assert len(results) >= 135  # what the reference server (scim2-server, in memory) passes
    logs = served.logs()
    assert TOKEN not in logs
    assert "scim: create User" in logs and "scim: delete Group" in logs


# --- scim2-server's storage contract, on the real node ---


@pytest.fixture(scope="module")
def contract_index(opensearch) -> Iterator[str]:
    index = f"test-principals-contract-{uuid.uuid4().hex}"
    yield index
    urllib.request.urlopen(urllib.request.Request(f"{opensearch.url}/{index}?ignore_unavailable=true",
                                                  method="DELETE"))


class TestDirectoryStorageContract(AsyncScimStorageContract):
    """Every rule of scim2-server's AsyncScimStorage, for the configuration the service announces (filter and
    sort; no cursors, so conftest deselects those tests). One index for the module, emptied after each test."""

    @pytest.fixture
    def provider(self) -> Any:
        return scim.service().provider

    @pytest.fixture
    def async_storage(self, opensearch, provider, contract_index) -> DirectoryStorage:
        return DirectoryStorage(Engine(opensearch.url, timeout_s=30), contract_index, provider)

    @pytest.fixture
    def storage(self, async_storage: DirectoryStorage) -> Iterator[BlockingStorage]:
        with asyncio.Runner() as runner:
            yield BlockingStorage(async_storage, runner)

            async def empty() -> None:
                if await async_storage.engine.index_exists(async_storage.index):
                    await async_storage.engine.delete_by_query(async_storage.index, {"match_all": {}})
                await async_storage.engine.close()

            runner.run(empty())
