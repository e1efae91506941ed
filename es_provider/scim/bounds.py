"""What one SCIM request may ask of the service (docs/identities.md, "Bounds"): checked on the raw request, before
scim2-server parses a filter or applies a PATCH, so a request too big to serve costs a JSON parse and a count.

Pure. Each refusal is a SCIM exception, answered 400 in SCIM's error body: a filter too long or with too many
comparisons is `tooMany` (RFC 7644 §3.12: more than the server is willing to process), too many PATCH operations
or members is `invalidValue`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
from scim2_models import InvalidValueException, TooManyException

MAX_OPERATIONS = 100  # PATCH operations per request (identity providers send a membership change as one operation)
MAX_GROUP_MEMBERS = 10_000  # members of one group, and member values in one request
MAX_FILTER_CHARS = 2_048  # a filter (query, .search body, or a PATCH path's [...]): one userName eq "…" is < 600
MAX_FILTER_TERMS = 20  # comparisons in one filter: identity providers send one
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"?')  # a string literal (an unterminated one to the end)
_OPERATOR = re.compile(r"(?<![\w.$:-])(?:eq|ne|co|sw|ew|gt|ge|lt|le|pr)(?![\w.$:-])", re.IGNORECASE)


def filter_terms(text: str) -> int:
    """The comparisons in a filter: its operators outside string literals (an over-count is only stricter)."""
    return len(_OPERATOR.findall(_QUOTED.sub('""', text)))


def check_filter(text: str, where: str) -> None:
    if len(text) > MAX_FILTER_CHARS:
        raise TooManyException(detail=f"{where} is longer than {MAX_FILTER_CHARS} characters")
    if filter_terms(text) > MAX_FILTER_TERMS:
        raise TooManyException(detail=f"{where} has more than {MAX_FILTER_TERMS} comparisons")


def check_members(count: int, where: str) -> None:
    if count > MAX_GROUP_MEMBERS:
        raise InvalidValueException(detail=f"{where} has more than {MAX_GROUP_MEMBERS} members")


def _members_in(value: Any) -> int:
    """Member value objects an operation's value (or a resource body) carries."""
    if isinstance(value, list):
        return len(value)
    if isinstance(value, Mapping):
        members = value.get("members")
        return len(members) if isinstance(members, list) else 0
    return 0


def _operations(body: Mapping[str, Any]) -> list[Any]:
    operations = body.get("Operations")
    return operations if isinstance(operations, list) else []


def _paths(operations: list[Any]) -> Iterator[str]:
    for operation in operations:
        if isinstance(operation, Mapping) and isinstance(operation.get("path"), str):
            yield operation["path"]


def check_request(method: str, path: str, query: Mapping[str, str], body: bytes) -> None:
    """Refuses (SCIMException) a request past a bound. A body that is not a JSON object passes: scim2-server
    refuses it in its own terms."""
    if "filter" in query:
        check_filter(query["filter"], "filter")
    if method not in ("POST", "PUT", "PATCH") or not body:
        return
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    if not isinstance(parsed, dict):
        return
    if isinstance(parsed.get("filter"), str):
        check_filter(parsed["filter"], "filter")
    if method == "PATCH":
        operations = _operations(parsed)
        if len(operations) > MAX_OPERATIONS:
            raise InvalidValueException(detail=f"a PATCH carries at most {MAX_OPERATIONS} operations")
        for operation_path in _paths(operations):
            check_filter(operation_path, "an operation's path")
        check_members(sum(_members_in(op.get("value")) for op in operations if isinstance(op, Mapping)),
                      "the PATCH")
    elif "/Groups" in path:
        check_members(_members_in(parsed), "the group")
