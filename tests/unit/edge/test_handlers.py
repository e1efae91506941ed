from __future__ import annotations

import pytest

from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.edge.handlers import parse_object


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"a": 1, "a": 2}', "duplicate"),
        (b'{"a": {"b": 1, "b": 1}}', "duplicate"),
        (b'{"a": [{"b": 1, "b": 2}]}', "duplicate"),
        (b'{"a": 1} {"b": 2}', "single valid JSON"),
        (b'{"a": 1} x', "single valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'"text"', "JSON object"),
        (b"", "single valid JSON"),
        (b'{"a": NaN}', "single valid JSON"),
        (b'{"a": Infinity}', "single valid JSON"),
        (b'{"a": "\xff"}', "UTF-8"),
        (b"\xef\xbb\xbf{}", "byte order mark"),
        (b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}", "nested"),
        (b'{"q": "\\ud800"}', "lone surrogate"),
        (b'{"q": "x\\uDFFFy"}', "lone surrogate"),
    ],
)
def test_refused_bodies(raw: bytes, reason: str) -> None:
    with pytest.raises(KnowledgeError) as caught:
        parse_object(raw)
    assert caught.value.code is ErrorCode.PROTOCOL_ERROR and caught.value.status == 400
    assert reason in caught.value.safe_message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"a": 1}', {"a": 1}),
        (b' {"a": "\\u8bbe"} \n', {"a": "设"}),
        ('{"q": "设备"}'.encode(), {"q": "设备"}),
        (b'{"brackets": "[[[{{{"}', {"brackets": "[[[{{{"}),
        (b'{"emoji": "\\ud83d\\ude00"}', {"emoji": "\U0001f600"}),
    ],
)
def test_accepted_bodies(raw: bytes, expected: dict) -> None:
    assert parse_object(raw) == expected
