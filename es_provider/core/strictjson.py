"""Pure: one strict JSON object from text, shared by request bodies and ingest records: valid UTF-8, no byte order
mark, exactly one object, no duplicate keys at any depth (which one would win is a guess, and a guess about
`tenant_id` or `acl.public` is a permission), no NaN/Infinity, no lone surrogates, bounded nesting. And the one
strict base model that configuration and protocol requests validate with."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

MAX_DEPTH = 64


class StrictModel(BaseModel):
    """strict: no "5" → 5, no true → 1; forbid: an unknown field is an error; frozen: validated once, then read."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class StrictJsonError(ValueError):
    """Why the text is not one strict JSON object, phrased to follow "body " or "record " (names a key at most,
    never a value)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJsonError(f"has a duplicate key {key[:64]!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, iteratively (no recursion limit to hit)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node)
    return deepest


# Made once: json.loads with hooks builds a new decoder on every call.
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def loads_object(raw: bytes | str) -> dict[str, Any]:
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise StrictJsonError("is not valid UTF-8") from None
    else:
        text = raw
    if text.startswith("\ufeff"):
        raise StrictJsonError("starts with a byte order mark")
    try:
        value = _DECODER.decode(text)
    except StrictJsonError:
        raise
    except (ValueError, RecursionError):
        # json's "Extra data" (trailing JSON or bytes) lands here too.
        raise StrictJsonError("is not a single valid JSON document") from None
    if not isinstance(value, dict):
        raise StrictJsonError("is not a JSON object")
    if _SURROGATE_ESCAPE.search(text):
        # "\ud800" is valid JSON syntax but no Unicode text: it would fail wherever the string is written again.
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise StrictJsonError("has a string that is not valid Unicode (a lone surrogate)") from None
    # Only a text with enough brackets can be too deep; the C parser itself stops runaway nesting (RecursionError).
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        raise StrictJsonError("is nested too deeply")
    return value
