"""What the `ingest --sync` tests share (test_ingest_sync.py, test_ingest_sync_interrupted.py): one folder synced
into one knowledge base through the real command, what the index then holds, and what u-alice is answered."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_provider.core.deadline import fixed_budget
from es_provider.engine.client import Engine
from es_provider.ingest.ownership import LABEL_FIELD
from helpers import served
from helpers.calls import ROUTE, body, headers
from helpers.command import in_subprocess
from helpers.setup import api_key, bearer

FILES = Path(__file__).resolve().parent.parent / "fixtures" / "files"
TOPIC = "turbine inspection"


def write_config(tmp_path: Path, kb: Any) -> Path:
    return served.write_config(tmp_path / "config.toml", "http://127.0.0.1:9200", [served.kb_entry(kb.alias)])


@dataclass
class Sync:
    """`ingest --sync` of one folder into one knowledge base, as an operator's cron job would run it."""

    url: str
    config: Path
    kb: Any
    folder: Path

    def run(self, *extra: str, source: str | None = "wiki", tenant: str | None = "team-a",
            paths: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        args = ["ingest", "--config", str(self.config), "--kb", self.kb.id, "--groups", "eng"]
        args += ["--tenant", tenant] if tenant else []
        args += ["--source", source] if source else []
        return in_subprocess(self.url, *args, "--sync", *extra, *(paths or (str(self.folder),)))

    @classmethod
    def of(cls, url: str, kb: Any, tmp_path: Path) -> Sync:
        """The folder `wiki` under tmp_path, synced with a config of its own."""
        return cls(url, write_config(tmp_path, kb), kb, tmp_path / "wiki")

    def files(self, names: dict[str, str]) -> None:
        """Makes the folder hold exactly these files (name → text)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        for name, text in names.items():
            (self.folder / name).parent.mkdir(parents=True, exist_ok=True)
            (self.folder / name).write_text(text)


def doc_text(name: str, extra: str = "") -> str:
    return f"# {name}\n\nThe {TOPIC} notes of {name}. {extra}\n"


async def chunks(engine: Engine, kb: Any, query: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    await engine.refresh(kb.alias)
    budget = fixed_budget(10_000, now_monotonic=time.monotonic())
    response = await engine.search(kb.alias, {"size": 10000, "query": query or {"match_all": {}},
                                              "sort": ["chunk_id"]}, budget)
    return [hit["_source"] for hit in response.get("hits", {}).get("hits", [])]


async def held(engine: Engine, kb: Any) -> set[tuple[str, str | None, str | None]]:
    """(document id, tenant, source label) of every chunk."""
    return {(c["document_id"], c.get("tenant_id"), c.get(LABEL_FIELD)) for c in await chunks(engine, kb)}


async def serve(client_for: Any, kb: Any) -> Any:
    """The service over the knowledge base, with a Dify key for u-alice of team-a."""
    return await client_for(kb, api_keys=[api_key(["project-documents"], tenants=["team-a"], subject="u-alice")])


async def answered(client: Any, execution: str) -> tuple[set[str], set[str]]:
    """The documents u-alice of team-a is answered about the topic, through SparkTide and through Dify."""
    sparktide = await client.post(ROUTE, json=body("u-alice", "team-a", query=TOPIC, topK=10, executionId=execution),
                                  headers=headers(**{"Idempotency-Key": execution}))
    dify = await client.post("/retrieval", headers=bearer(), data=json.dumps(
        {"knowledge_id": "project-documents", "query": TOPIC, "retrieval_setting": {"top_k": 10, "score_threshold": 0}}))
    assert sparktide.status == 200 and dify.status == 200
    return ({item["documentId"] for item in (await sparktide.json())["items"]},
            {record["metadata"]["document_id"] for record in (await dify.json())["records"]})


def broken_pdf(folder: Path) -> None:
    shutil.copy(FILES / "broken.pdf", folder / "broken.pdf")
