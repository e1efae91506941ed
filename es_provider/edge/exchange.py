"""One request, from who asked to what it was answered: the record its handler fills and every layer writes from.

The error middleware (web/middleware.py) opens an `Exchange` for each platform request; the handler fills it in the
order it handles the request — who asked (credential, identity), what was asked (knowledge bases, the query), what it
was answered (`Answer`) — by plain typed assignment; then each layer writes its own output from it once: the access
record (audit/access.py), the trace's attributes (core/tracing.py), the idempotency store (it keeps the `Answer` as
it is). Adding a protocol is then: parse to a SearchRequest, render the SearchResult to an `Answer`, register a
route.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from es_provider.audit.access import new_id
from es_provider.core.acl import Identity
from es_provider.search.domain import Chunk, SearchResult, Served, served


@dataclass(frozen=True, slots=True)
class Answer:
    """A protocol's answer to one search result, as sent: its body's bytes, the chunks it holds in order (the access
    record's `served`), the rerank outcome (the `X-Rerank` header). The idempotency store keeps it as it is."""

    body: bytes
    served: tuple[Served, ...] = ()
    rerank: str | None = None
    problems: tuple[str, ...] = ()  # for the log: what the renderer skipped or fixed, and why

    @staticmethod
    def of(body: bytes, chunks: Iterable[Chunk], result: SearchResult | None = None,
           problems: Iterable[str] = ()) -> Answer:
        """The answer holding `chunks`, with the rerank outcome of the `result` they came from."""
        return Answer(body, served(chunks), result.rerank if result is not None else None, tuple(problems))


@dataclass(slots=True)
class Exchange:
    """One platform request's facts, filled in while it is handled. Never a secret; the query only to be hashed
    (the access record keeps a keyed hash, never the text)."""

    protocol: str
    route: str
    method: str
    remote: str
    id: str = field(default_factory=new_id)
    # Who asked.
    credential: str | None = None  # "callback:<secret_ref>", "key:<key_ref>", "workbench:session"; never a secret
    app_id: str | None = None
    tenants: tuple[str, ...] = ()
    subject: str | None = None  # whom the answer is for: as claimed, then as the identity checked it
    acting_subject: str | None = None  # the end user an API key named (AgentArts subject_id, Dify acting_subject)
    request_ids: Mapping[str, str] = field(default_factory=dict)  # the platform's runId, traceId, executionId
    # What was asked.
    knowledge: list[tuple[str, str | None]] = field(default_factory=list)  # (id, version)
    query: str | None = field(default=None, repr=False)
    # What it was answered.
    answer: Answer | None = None

    def identified(self, identity: Identity, *, acting_subject: str | None = None) -> None:
        """Who the answer is for, as the principal store checked it."""
        self.app_id = identity.app_id
        self.tenants = tuple(sorted(identity.tenants))
        self.subject = identity.subject_id
        self.acting_subject = acting_subject

    @property
    def served(self) -> tuple[Served, ...]:
        return self.answer.served if self.answer is not None else ()


EXCHANGE = web.RequestKey("exchange", Exchange)


def exchange_of(request: web.Request) -> Exchange:
    """The request's exchange; one made here (and written nowhere) for a request the middleware opened none for (a
    handler called outside the app, as the benchmarks do)."""
    found = request.get(EXCHANGE)
    if found is None:
        found = request[EXCHANGE] = Exchange("", "", request.method, "")
    return found
