"""The rerank stage: a rerank model's HTTP API reorders the chunks a search may answer with (docs/retrieval.md
"Rerank").

It only ever sees chunks that passed the identity's filters and the per-hit re-check (retrieval.py calls it after
both), and only their text and the query: never an identity, never another caller's chunk. Its answer can only
reorder them: an index outside the list, a repeated index, a missing one, a score that is not a finite number or
that the calibration cannot map, and a redirect (never followed) are faults of the reranker; a fault, an error, a
timeout or no time left means the first-stage order, counted and logged (once per reason per minute), never an
error for the caller.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import aiohttp
import orjson

from es_provider.config.knowledge import RerankApi, RerankSettings
from es_provider.core.calibration import Logistic, lead_of
from es_provider.search.domain import Chunk
from es_provider.search.embedders import api_headers, passage_text

log = logging.getLogger("es_provider.rerank")

# Kept for rendering and sending the answer after the reranker's: its wait is the request's budget less this.
RENDER_MARGIN_S = 0.025
LOG_WINDOW_S = 60.0
# An answer for 1,024 candidates is about 50 KB; a server that sends more is not read to the end.
MAX_ANSWER_BYTES = 4 * 1024 * 1024

Reason = Literal["unreachable", "timeout", "status", "malformed", "no_time"]
# What the answer says (the X-Rerank header): "applied", or "first-stage: <reason>".
Outcome = str


class RerankFault(Exception):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason: Reason = reason
        self.detail = detail


# --- pure: the two API shapes ---

def request_body(api: RerankApi, model: str | None, query: str, texts: Sequence[str]) -> dict[str, Any]:
    if api == "tei":
        return {"query": query, "texts": list(texts), "raw_scores": False, "return_text": False}
    return {"model": model, "query": query, "documents": list(texts), "top_n": len(texts), "return_documents": False}


def parse_answer(api: RerankApi, payload: Any, count: int) -> list[tuple[int, float]]:
    """(candidate index, score) for every one of `count` candidates, best first; a RerankFault otherwise."""
    rows = (payload.get("results") if isinstance(payload, dict) else None) if api == "cohere" else payload
    key = "relevance_score" if api == "cohere" else "score"
    if not isinstance(rows, list):
        raise RerankFault("malformed", f"expected a list of results, got {type(rows).__name__}")
    ranked: list[tuple[int, float]] = []
    seen: set[int] = set()
    for row in rows:
        index = row.get("index") if isinstance(row, dict) else None
        score = row.get(key) if isinstance(row, dict) else None
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise RerankFault("malformed", f"index {index!r} is not one of the {count} candidates")
        if index in seen:
            raise RerankFault("malformed", f"index {index} answered twice")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise RerankFault("malformed", f"score {score!r} of index {index} is not a finite number")
        seen.add(index)
        ranked.append((index, float(score)))
    if len(seen) != count:
        raise RerankFault("malformed", f"{count - len(seen)} of {count} candidates were not scored")
    ranked.sort(key=lambda pair: -pair[1])  # stable: equal scores keep the reranker's order
    return ranked


def reordered(chunks: Sequence[Chunk], ranked: Sequence[tuple[int, float]], mapping: Logistic) -> list[Chunk]:
    """The chunks in the reranker's order, each scored by the rerank mode's calibration (calibration.py). Finite
    scores whose ratios overflow (`[5e-324, -1e308]`: s/s_top and the lead are infinite, their sum inf − inf) cannot
    be calibrated: a RerankFault, never a chunk without a score."""
    scores = [score for _, score in ranked]
    top = max(scores, default=0.0)
    lead = lead_of(scores)
    out = []
    for rank, (index, score) in enumerate(ranked, start=1):
        p = mapping.probability(score, top, rank, lead)
        if not (math.isfinite(lead) and math.isfinite(score / top if top > 0 else 1.0) and math.isfinite(p)):
            raise RerankFault("malformed", f"score {score!r} of index {index} cannot be calibrated "
                                           f"(best score {top!r})")
        out.append(replace(chunks[index], score=p))
    return out


def rerank_text(title: str | None, content: str, limit: int) -> str:
    """What the reranker reads of a chunk: the text an embedder reads (its title gives a short chunk context)."""
    return passage_text(title, content)[:limit]


# --- the client ---

async def _bounded(response: aiohttp.ClientResponse) -> bytes:
    raw = bytearray()
    async for piece in response.content.iter_chunked(65536):
        raw += piece
        if len(raw) > MAX_ANSWER_BYTES:
            raise RerankFault("malformed", f"answer larger than {MAX_ANSWER_BYTES} bytes")
    return bytes(raw)


class Reranker:
    """One keep-alive HTTP client for the configured rerank API."""

    def __init__(self, settings: RerankSettings, environ: Mapping[str, str],
                 on_fallback: Callable[[str], None] | None = None,
                 on_called: Callable[[float, bool], None] | None = None) -> None:
        self.settings = settings
        self._headers = api_headers(settings.key_ref, environ)
        self._session: aiohttp.ClientSession | None = None
        self._on_fallback = on_fallback
        self._on_called = on_called
        self._logged: dict[str, tuple[float, int]] = {}  # reason → (window start, fallbacks since)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=60))
        return self._session

    async def rank(self, query: str, texts: Sequence[str], timeout_s: float) -> list[tuple[int, float]]:
        """The reranker's order of `texts`; a RerankFault when it cannot be had within `timeout_s`."""
        s = self.settings
        body = orjson.dumps(request_body(s.api, s.model, query, texts))
        started = time.monotonic()
        ok = False
        try:
            async with asyncio.timeout(timeout_s), \
                    self._client().post(s.url, data=body, headers=self._headers, allow_redirects=False) as response:
                # Never followed: a redirect would re-post the query and the caller's permitted texts elsewhere.
                if response.status != 200:
                    raise RerankFault("status", f"answered {response.status}")
                raw = await _bounded(response)
            try:
                payload = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise RerankFault("malformed", f"not JSON ({len(raw)} bytes)") from None
            ranked = parse_answer(s.api, payload, len(texts))
            ok = True
            return ranked
        except TimeoutError:
            raise RerankFault("timeout", f"no answer within {timeout_s * 1000:.0f} ms") from None
        except aiohttp.ClientError as exc:
            raise RerankFault("unreachable", f"{type(exc).__name__}: {exc}") from None
        finally:
            if self._on_called is not None:
                self._on_called(time.monotonic() - started, ok)

    def fell_back(self, reason: Reason, detail: str) -> Outcome:
        """Counts a fallback to the first-stage order and logs it once per reason per window."""
        if self._on_fallback is not None:
            self._on_fallback(reason)
        now = time.monotonic()
        start, since = self._logged.get(reason, (-math.inf, 0))
        if now - start >= LOG_WINDOW_S:
            more = f" ({since} more since the last such message)" if since else ""
            log.warning("rerank: answered in first-stage order (%s: %s)%s", reason, detail, more)
            self._logged[reason] = (now, 0)
        else:
            self._logged[reason] = (start, since + 1)
        return f"first-stage: {reason}"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


@dataclass(frozen=True, slots=True)
class Reranking:
    """The rerank stage as one search uses it."""

    reranker: Reranker
    mapping: Logistic

    async def apply(self, query: str, chunks: Sequence[Chunk], remaining_s: float) -> tuple[list[Chunk], Outcome]:
        """The chunks reordered and rescored, or as they came (first-stage order and scores) on any failure."""
        if not chunks:
            return [], "applied"
        s = self.reranker.settings
        wait = min(s.timeout_ms / 1000, remaining_s - RENDER_MARGIN_S)
        if wait <= 0:
            return list(chunks), self.reranker.fell_back("no_time", "the deadline leaves no time to rerank")
        try:
            texts = [rerank_text(c.title, c.content, s.max_characters) for c in chunks]
            ranked = await self.reranker.rank(query, texts, wait)
            return reordered(chunks, ranked, self.mapping), "applied"
        except RerankFault as fault:
            return list(chunks), self.reranker.fell_back(fault.reason, fault.detail)
