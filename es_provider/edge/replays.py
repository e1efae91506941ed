"""Replay refusal shared by every process that serves the same knowledge bases: N workers of one `serve`, or N
instances behind a load balancer. A signed callback's first use creates a document named by its signature's digest
in one engine index; a second use, in whichever process, finds it there and is refused. The engine is the store the
deployment already has; its create-if-absent is atomic. Documents expire with the signature window (a periodic
delete; a signature past its window is refused by its timestamp anyway, so a late delete admits nothing).
"""

from __future__ import annotations

import asyncio
import logging
import time

from es_provider.core.deadline import Budget
from es_provider.core.errors import KnowledgeError
from es_provider.engine.client import Engine

log = logging.getLogger("es_provider.replays")

INDEX_BODY = {
    # Translog synced every 5 s instead of at every write: a first use is lost only if the node crashes within
    # those seconds (a replay of it then passes once); syncing per write halved signed throughput (benchmarks §8).
    "settings": {"index": {"number_of_shards": 1, "auto_expand_replicas": "0-1", "refresh_interval": "30s",
                           "translog.durability": "async", "translog.sync_interval": "5s"}},
    "mappings": {"dynamic": "strict", "properties": {"expires_at": {"type": "date", "format": "epoch_millis"}}},
}


class SharedReplays:
    def __init__(self, engine: Engine, index: str) -> None:
        self._engine = engine
        self._index = index
        self._used = False  # the index exists (this process wrote to it, or found it): worth sweeping

    async def first_use(self, digest: str, expires_at: float, budget: Budget) -> bool:
        """True for the first use of this signature anywhere; False for a replay. An engine failure raises (the
        request is refused: never accepted unchecked). The index is made by the first signed callback that
        finds it missing, so the service starts without the engine, as it does for searches."""
        first = await self._engine.create_once(self._index, digest, {"expires_at": int(expires_at * 1000)}, budget,
                                               index_body=INDEX_BODY)
        self._used = True
        return first

    async def forget_expired(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        query = {"range": {"expires_at": {"lt": int(now * 1000)}}}
        return await self._engine.delete_by_query(self._index, query, refresh=False)

    async def sweep(self, every_s: float) -> None:
        """Runs for the life of the app: forgets expired signatures every `every_s`. An index that other processes
        (or this one's previous life) made is swept too, though this process has had no signed call yet."""
        while True:
            await asyncio.sleep(every_s)
            try:
                self._used = self._used or await self._engine.index_exists(self._index)
                if not self._used:
                    continue
                await self.forget_expired()
            except KnowledgeError as exc:
                log.warning("could not forget expired signatures: %s", exc.detail)
