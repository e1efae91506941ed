"""Strict JSON request bodies, shared by every protocol: one content type, bounded size, valid UTF-8,
exactly one JSON object, no duplicate keys at any depth, no NaN/Infinity."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from es_provider.errors import protocol_error

MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey("duplicate key")
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


def parse_object(raw: bytes) -> dict[str, Any]:
    """Pure: bytes → one JSON object, or a PROTOCOL_ERROR naming what is wrong (never the content)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise protocol_error("body is not valid UTF-8") from None
    if text.startswith("\ufeff"):
        raise protocol_error("body starts with a byte order mark")
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except _DuplicateKey:
        raise protocol_error("body has a duplicate JSON key") from None
    except (ValueError, RecursionError):
        # json's "Extra data" (trailing JSON or bytes) lands here too.
        raise protocol_error("body is not a single valid JSON document") from None
    if not isinstance(value, dict):
        raise protocol_error("body must be a JSON object")
    if _SURROGATE_ESCAPE.search(text):
        # "\ud800" is valid JSON syntax but no Unicode text: it would fail wherever the string is written again.
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise protocol_error("body has a string that is not valid Unicode (a lone surrogate)") from None
    # Only a body with enough brackets can be too deep; the C parser itself stops runaway nesting (RecursionError).
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        raise protocol_error("body is nested too deeply")
    return value


def check_content_type(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise protocol_error("content type must be application/json", status=415)
    charset = request.charset
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise protocol_error("charset must be utf-8", status=415)


async def read_body(request: web.Request, max_bytes: int) -> bytes:
    """The raw body, refusing (413) as soon as it exceeds `max_bytes`, whatever Content-Length claims."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise protocol_error("body is too large", status=413)
    buf = bytearray()
    while True:
        chunk = await request.content.read(max_bytes + 1 - len(buf))
        if not chunk:
            break
        buf.extend(chunk)
        if len(buf) > max_bytes:
            raise protocol_error("body is too large", status=413)
    return bytes(buf)


async def read_object(request: web.Request, max_bytes: int) -> tuple[bytes, dict[str, Any]]:
    check_content_type(request)
    raw = await read_body(request, max_bytes)
    return raw, parse_object(raw)

