"""core/strictjson.py: one strict JSON object from text, or the reason it is not, phrased to follow "body " or
"record " and naming a key at most (never a value); and the strict, closed, frozen base model."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from es_provider.core.strictjson import MAX_DEPTH, StrictJsonError, StrictModel, loads_object


def nested(depth: int) -> str:
    """An object whose value is nested `depth` levels deep, counting the object itself."""
    return '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


@pytest.mark.parametrize(("raw", "value"), [
    ('{"a": 1}', {"a": 1}),
    (b'{"a": "\\u8bbe"}', {"a": "设"}),
    ("{}  \n", {}),
    ('{"q": "\\ud83d\\ude00"}', {"q": "\U0001f600"}),  # a surrogate pair is one character
    ('{"a": "[[[[[{{{{{"}', {"a": "[[[[[{{{{{"}),  # brackets in a string are no depth
    (nested(MAX_DEPTH), json.loads(nested(MAX_DEPTH))),  # as deep as it may be
])
def test_accepted(raw: str | bytes, value: dict[str, object]) -> None:
    assert loads_object(raw) == value


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"a": "\xff"}', "is not valid UTF-8"),
    ("\ufeff{}", "starts with a byte order mark"),
    ('{"tenant_id": "a", "tenant_id": ""}', "has a duplicate key 'tenant_id'"),
    ('{"acl": [{"public": false, "public": true}]}', "has a duplicate key 'public'"),
    ('{"' + "k" * 100 + '": 1, "' + "k" * 100 + '": 2}', f"has a duplicate key {'k' * 64!r}"),  # a key, cut short
    ('{"a": NaN}', "is not a single valid JSON document"),
    ('{"a": -Infinity}', "is not a single valid JSON document"),
    ('{"a": 1} {"b": 2}', "is not a single valid JSON document"),
    ("", "is not a single valid JSON document"),
    ('"text"', "is not a JSON object"),
    ("[1]", "is not a JSON object"),
    ('{"q": "\\ud800"}', "has a string that is not valid Unicode (a lone surrogate)"),
    (nested(MAX_DEPTH + 1), "is nested too deeply"),
    ("[" * 100_000 + "]" * 100_000, "is not a single valid JSON document"),  # the parser's own limit
])
def test_refused_with_its_reason(raw: str | bytes, reason: str) -> None:
    with pytest.raises(StrictJsonError) as caught:
        loads_object(raw)
    assert str(caught.value) == reason


class Sample(StrictModel):
    n: int


@pytest.mark.parametrize(("data", "error"), [
    ({"n": "5"}, "int_type"),  # no "5" → 5
    ({"n": True}, "int_type"),  # no true → 1
    ({"n": 5, "x": 1}, "extra_forbidden"),
])
def test_the_strict_model_refuses(data: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Sample.model_validate(data)
    assert [e["type"] for e in caught.value.errors()] == [error]


def test_the_strict_model_is_frozen() -> None:
    sample = Sample(n=1)
    with pytest.raises(ValidationError):
        sample.n = 2
