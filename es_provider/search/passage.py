"""Pure: the passage of a long text that answers a query. An existing index may keep whole documents in one field
(LangChain's loaders, Elastic connectors' `body`); the protocols answer at most 16,384 characters an item (SparkTide),
and an agent reads a passage better than a book. The passage is the window of `size` characters holding the most
occurrences of the query's words (and CJK characters), widened to start at a paragraph or sentence where one is near;
a text no word matches (a kNN hit) is answered from its start.

The work per text is bounded whatever its length (a 3,000,000-character document cost 1.2-1.7 s of CPU; issue 52):
only its first `scan_chars` characters are read, fewer the more units the query has (each is a pass or two over
them, in C); the densest window is sought among at most MAX_HITS occurrences, those of the query's rarest units
there (a unit found everywhere tells no window from another), in one pass over them. A passage past that prefix is
not sought: the best window within it is answered (3-6 ms a 3M-character text, measured: docs/existing-index.md)."""

from __future__ import annotations

import re

from es_provider.search.query import query_units

# Where a passage may start or end: after a paragraph break or a sentence's end (Latin or CJK punctuation).
_BREAK = re.compile(r"\n\s*|[.!?]\s+|[。！？；]")
_SNAP = 200  # how far (characters) a boundary may move the window's edges

# Character passes per text: each unit costs up to two (str.count, then str.find to its occurrences; in C, 0.1-1 ns a
# character), lowercasing one on ASCII text and about FOLD_PASSES on other text (7 ns a CJK character). 2**23 keeps a
# 3M-character text under ~10 ms whatever the query (measured, docs/existing-index.md) while a few-word query still
# reads its first several hundred thousand characters.
SCAN_PASSES = 1 << 23
FOLD_PASSES = 8
MIN_SCAN_SIZES = 2  # the prefix read is never shorter than this many passages, however many units
MAX_HITS = 4096  # occurrences the densest window is sought among (Python work per occurrence)
_FOLD_SLICE = 1 << 18  # lowercased in slices: no single C call holds the interpreter for long (a thread's caller)


def scan_chars(size: int, units: int, fold: int) -> int:
    """How many leading characters of a long text are read for its passage of `size` with `units` distinct units;
    `fold`: the passes lowercasing costs (0: no unit has case, 1: ASCII text, else FOLD_PASSES)."""
    return max(MIN_SCAN_SIZES * size, SCAN_PASSES // (2 * max(1, units) + fold))


def best_passage(text: str, query: str, size: int) -> str:
    """`text` itself when it fits in `size` characters, else its best window of at most `size` characters."""
    if len(text) <= size:
        return text
    start = _start(text, _densest(_hits(text, query, size), size), size)
    end = min(len(text), start + size)
    if end < len(text):
        end = _snap_end(text, start, end)
    return text[start:end].strip() or text[:size]


def _hits(text: str, query: str, size: int) -> list[int]:
    """The sorted positions, in the scanned prefix, of the query's rarest units there (at most MAX_HITS)."""
    units = sorted(set(query_units(query)))  # sorted: the same passage whatever the set's order
    if not units:
        return []
    cased = any(unit != unit.upper() for unit in units)  # CJK characters and digits have no case
    fold = 0 if not cased else 1 if text.isascii() else FOLD_PASSES
    prefix = text[:scan_chars(size, len(units), fold)]
    if cased:
        folded = "".join(prefix[at:at + _FOLD_SLICE].lower() for at in range(0, len(prefix), _FOLD_SLICE))
        if len(folded) != len(prefix):  # a character whose lowercase is longer (İ): positions would not match text's
            return []
        prefix = folded
    counts = sorted((count, unit) for unit in units if (count := prefix.count(unit)))
    if not counts:
        return []
    found: list[int] = []
    for count, unit in counts:  # rarest first: the units that tell one window from another
        if found and len(found) + count > MAX_HITS:
            break
        found += _positions(prefix, unit, min(count, MAX_HITS - len(found)))
    found.sort()  # already sorted runs, one per unit: timsort merges them
    return found


def _positions(folded: str, unit: str, most: int) -> list[int]:
    """The first `most` occurrences (counted already: no last pass to the end that finds nothing)."""
    found = [folded.find(unit)]
    while len(found) < most:
        found.append(folded.find(unit, found[-1] + len(unit)))
    return found


def _densest(hits: list[int], size: int) -> int | None:
    """The first hit of the window with the most hits; None without hits. One pass: the window's end only moves on."""
    if not hits:
        return None
    reach = size * 3 // 4  # room after the window's last hit for its context
    best, first, end = 0, hits[0], 0
    for i, at in enumerate(hits):
        while end < len(hits) and hits[end] < at + reach:
            end += 1
        if end - i > best:
            best, first = end - i, at
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
