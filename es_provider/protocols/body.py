"""Strict JSON request bodies, shared by every protocol: one content type, and exactly one strict JSON object
(strictjson.py). Reading the body itself, bounded in size and time, is admission's job (admission.py)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from es_provider.errors import protocol_error
from es_provider.strictjson import StrictJsonError, loads_object


def parse_object(raw: bytes) -> dict[str, Any]:
    """Pure: bytes → one JSON object, or a PROTOCOL_ERROR naming what is wrong (never the content)."""
    try:
        return loads_object(raw)
    except StrictJsonError as exc:
        raise protocol_error(f"body {exc}") from None


def check_content_type(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise protocol_error("content type must be application/json", status=415)
    charset = request.charset
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise protocol_error("charset must be utf-8", status=415)
