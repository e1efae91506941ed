"""edge/exchange.py: the Answer a protocol renders (Answer.of: the chunks it holds in order, the rerank outcome of
the result they came from), what Exchange.identified fills in (and so what the access record names), and the
exchange a request carries. The access record's whole shape: tests/unit/audit/test_access.py."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from es_provider.audit import access
from es_provider.core.acl import Identity
from es_provider.edge.exchange import EXCHANGE, Answer, Exchange, exchange_of
from es_provider.search.domain import Chunk, SearchResult


def chunk(chunk_id: str, score: float | None, kb: str = "kb") -> Chunk:
    return Chunk(knowledge_id=kb, chunk_id=chunk_id, document_id=f"doc-{chunk_id[0]}", content="text", title=None,
                 tenant_id=None, source={"type": "DOCUMENT", "id": f"doc-{chunk_id[0]}"}, metadata={}, score=score)


ONE, TWO, OTHER = chunk("a1", 0.9), chunk("a2", None), chunk("b1", 0.1, kb="kb2")


@pytest.mark.parametrize(("chunks", "result", "problems", "served", "rerank"), [
    pytest.param([], None, [], (), None, id="empty"),
    pytest.param([ONE, TWO, OTHER], None, [], (("kb", "doc-a", "a1", 0.9), ("kb", "doc-a", "a2", None),
                                                ("kb2", "doc-b", "b1", 0.1)), None, id="in-order-none-score-kept"),
    pytest.param([OTHER, ONE], None, [], (("kb2", "doc-b", "b1", 0.1), ("kb", "doc-a", "a1", 0.9)), None,
                 id="the-answer-s-order-not-the-result-s"),
    pytest.param([ONE], SearchResult((ONE,), 1, (), rerank="applied"), ["skipped c-9: bad id"],
                 (("kb", "doc-a", "a1", 0.9),), "applied", id="rerank-of-its-result"),
    pytest.param([ONE], SearchResult((ONE,), 1, ()), [], (("kb", "doc-a", "a1", 0.9),), None, id="no-rerank-stage"),
])
def test_answer_of(chunks: list[Chunk], result: SearchResult | None, problems: list[str],
                   served: tuple[object, ...], rerank: str | None) -> None:
    answer = Answer.of(b"{}", iter(chunks), result, iter(problems))
    assert answer == Answer(b"{}", served, rerank, tuple(problems))  # type: ignore[arg-type]


def exchange() -> Exchange:
    return Exchange("dify", "/retrieval", "POST", "10.0.0.1", id="r1", subject="as-claimed")


@pytest.mark.parametrize(("identity", "acting", "filled"), [
    pytest.param(Identity("app-1", frozenset({"t-b", "t-a"}), "u-alice"), None,
                 ("app-1", ("t-a", "t-b"), "u-alice", None), id="tenants-sorted"),
    pytest.param(Identity("app-1", frozenset(), None), None, ("app-1", (), None, None),
                 id="no-tenant-no-subject-replaces-the-claim"),
    pytest.param(Identity("app-2", frozenset({"t"}), "svc"), "u-bob", ("app-2", ("t",), "svc", "u-bob"),
                 id="acting-subject"),
])
def test_identified_fills_who_the_answer_is_for(identity: Identity, acting: str | None,
                                                filled: tuple[object, ...]) -> None:
    made = exchange()
    made.identified(identity, acting_subject=acting)
    assert (made.app_id, made.tenants, made.subject, made.acting_subject) == filled
    stored = access.record(made, status=200, code="", moment="t", duration_ms=1, worker=1)
    assert (stored["app_id"], tuple(stored["tenants"]), stored["subject"], stored["acting_subject"]) == filled


@pytest.mark.parametrize(("answer", "served"), [
    (None, ()),
    (Answer(b"", (("kb", "d", "c", 1.0),)), (("kb", "d", "c", 1.0),)),
])
def test_served_is_the_answer_s(answer: Answer | None, served: tuple[object, ...]) -> None:
    made = exchange()
    made.answer = answer
    assert made.served == served
    assert access.record(made, status=200, code="", moment="t", duration_ms=1, worker=1)["documents"] == [
        document for _, document, _, _ in served]


def test_a_request_s_exchange_is_the_one_opened_else_one_made_once() -> None:
    opened = exchange()
    request = make_mocked_request("POST", "/retrieval")
    request[EXCHANGE] = opened
    assert exchange_of(request) is opened
    bare = make_mocked_request("GET", "/healthz")
    made = exchange_of(bare)
    assert (made.protocol, made.route, made.method, made.remote) == ("", "", "GET", "")
    assert exchange_of(bare) is made and made.id
