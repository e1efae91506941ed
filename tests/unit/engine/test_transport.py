"""engine/transport.py: opensearch-py's bodies through orjson, and the HTTP/1.1 client: nodes in turn, its answers and
failures raised as opensearch-py's own exception types (so map_error and the retry rule treat both clients alike);
a redirect is never followed. The door's connections themselves: test_http1.py."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from opensearchpy.exceptions import ConnectionError as EngineConnectionError
from opensearchpy.exceptions import TransportError

from es_provider.core.errors import ConnectFailed, Disconnected, Redirected
from es_provider.engine import transport
from es_provider.engine.connection import Connection, Node
from es_provider.engine.transport import Http1Client, OrjsonSerializer


@pytest.mark.parametrize(("data", "written"), [
    ({"query": {"match_all": {}}, "size": 0}, '{"query":{"match_all":{}},"size":0}'),
    ({"text": "中文 ☃"}, '{"text":"中文 ☃"}'),
    ('{"already": "serialised"}', '{"already": "serialised"}'),  # a string or bytes body goes as it is
    (b"{}\n{}\n", b"{}\n{}\n"),
])
def test_the_serializer_writes_compact_utf8(data: Any, written: str | bytes) -> None:
    assert OrjsonSerializer().dumps(data) == written


def test_the_serializer_reads_what_it_wrote() -> None:
    body = {"hits": {"hits": [{"_id": "a", "_score": 1.5}]}, "took": 3}
    serializer = OrjsonSerializer()
    assert serializer.loads(serializer.dumps(body)) == body


class Answers:
    """A node's pool that gives the next of the answers handed to it: (status, raw body) or an exception."""

    script: ClassVar[dict[str, list[tuple[int, bytes] | BaseException]]] = {}
    asked: ClassVar[list[str]] = []

    def __init__(self, node: Node, **_: Any) -> None:
        self.node = node

    async def post(self, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        Answers.asked.append(self.node.host)
        answer = Answers.script[self.node.host].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def close(self) -> None:
        pass


def door(monkeypatch: pytest.MonkeyPatch, **script: list[tuple[int, bytes] | BaseException]) -> Http1Client:
    monkeypatch.setattr(transport, "Pool", Answers)
    Answers.script, Answers.asked = script, []
    return Http1Client(Connection.plain(",".join(f"http://{host}:9200" for host in script)))


def test_the_nodes_are_asked_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    searched = door(monkeypatch, a=[(200, b'{"n": 1}')] * 2, b=[(200, b'{"n": 2}')] * 2)
    answers = [asyncio.run(searched.post("/_search", b"{}")) for _ in range(4)]
    assert Answers.asked == ["b", "a", "b", "a"] and [a["n"] for a in answers] == [2, 1, 2, 1]


@pytest.mark.parametrize(("answer", "raised", "kind"), [
    ((503, b'{"error": {"type": "search_phase_execution_exception"}, "status": 503}'), TransportError,
     "search_phase_execution_exception"),
    ((429, b'{"error": "rejected_execution_exception"}'), TransportError, "rejected_execution_exception"),
    ((502, b"<html>Bad Gateway</html>"), TransportError, "unparseable answer"),  # a proxy's page
    ((307, b""), EngineConnectionError, None),
    (ConnectFailed("refused"), EngineConnectionError, None),
    (Disconnected("cut off"), EngineConnectionError, None),
])
def test_failures_are_opensearch_pys_types(monkeypatch: pytest.MonkeyPatch, answer: tuple[int, bytes] | BaseException,
                                           raised: type[Exception], kind: str | None) -> None:
    searched = door(monkeypatch, a=[answer])
    with pytest.raises(raised) as failed:
        asyncio.run(searched.post("/_search", b"{}"))
    if kind is not None:
        assert isinstance(failed.value, TransportError) and failed.value.error == kind
    else:
        assert isinstance(failed.value, EngineConnectionError)


def test_a_redirect_names_the_node_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    searched = door(monkeypatch, a=[(301, b"")])
    with pytest.raises(EngineConnectionError) as failed:
        asyncio.run(searched.post("/_search", b"{}"))
    assert isinstance(failed.value.info, Redirected) and failed.value.info.status == 301
    assert "http://a:9200 answered a redirect" in str(failed.value.info)
