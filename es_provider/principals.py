"""The principal store as the request path sees it: a subject's groups from the organisation's directory
(directory.py's index), cached per process and forgotten whenever the store's change counter moves.

Writers (the SCIM service, `es-provider principals import`) call `announce_change` after every change they made;
each process polls the counter (`[directory] poll_interval_s`), so a revoked membership stops granting everywhere
within about one poll. The request path reads the store only on a cache miss.
"""

from __future__ import annotations

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from es_provider import directory
from es_provider.engine import Engine
from es_provider.errors import KnowledgeError


async def announce_change(engine: Engine, index: str) -> None:
    """Moves the store's change counter (after a change is written and refreshed), so every process forgets
    what it cached. A change that cannot be announced fails loudly: the caller answers with an error."""
    async for attempt in AsyncRetrying(retry=retry_if_exception_type(KnowledgeError), stop=stop_after_attempt(3),
                                       wait=wait_fixed(0.2), reraise=True):
        with attempt:
            await engine.put_document(index, directory.COUNTER_ID, directory.COUNTER_DOC,
                                      index_body=directory.INDEX_BODY)
