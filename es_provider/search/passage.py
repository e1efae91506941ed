"""Pure: the passage of a long text that answers a query. An existing index may keep whole documents in one field
(LangChain's loaders, Elastic connectors' `body`); the protocols answer at most 16,384 characters an item (SparkTide),
and an agent reads a passage better than a book. The passage is the window of `size` characters holding the most
occurrences of the query's words (and CJK characters), widened to start at a paragraph or sentence where one is near;
a text no word matches (a kNN hit) is answered from its start."""

from __future__ import annotations

import bisect
import re

from es_provider.search.query import query_units

# Where a passage may start or end: after a paragraph break or a sentence's end (Latin or CJK punctuation).
_BREAK = re.compile(r"\n\s*|[.!?]\s+|[。！？；]")
_SNAP = 200  # how far (characters) a boundary may move the window's edges


def passage(text: str, query: str, size: int) -> str:
    """`text` itself when it fits in `size` characters, else its best window of at most `size` characters."""
    if len(text) <= size:
        return text
    folded = text.lower()  # the same length as text for the scripts documents are in; checked below
    hits = sorted(_positions(folded, set(query_units(query)))) if len(folded) == len(text) else []
    start = _start(text, _densest(hits, size), size)
    end = min(len(text), start + size)
    if end < len(text):
        end = _snap_end(text, start, end)
    return text[start:end].strip() or text[:size]


def _positions(folded: str, units: set[str]) -> list[int]:
    found = []
    for unit in units:
        at = folded.find(unit)
        while at != -1:
            found.append(at)
            at = folded.find(unit, at + len(unit))
    return found


def _densest(hits: list[int], size: int) -> int | None:
    """The first hit of the window with the most hits; None without hits."""
    if not hits:
        return None
    best, first = 0, hits[0]
    for i, at in enumerate(hits):
        count = bisect.bisect_left(hits, at + size * 3 // 4, i) - i  # room after the last hit for its context
        if count > best:
            best, first = count, at
    return first


def _start(text: str, first: int | None, size: int) -> int:
    """The start of the sentence or paragraph holding the first hit, when it is near; else a little before it."""
    if first is None:
        return 0
    breaks = [m.end() for m in _BREAK.finditer(text, max(0, first - _SNAP), first + 1) if m.end() <= first]
    return breaks[-1] if breaks else max(0, first - size // 8)


def _snap_end(text: str, start: int, end: int) -> int:
    breaks = [m.end() for m in _BREAK.finditer(text, max(start + 1, end - _SNAP), end)]
    return breaks[-1] if breaks else end
