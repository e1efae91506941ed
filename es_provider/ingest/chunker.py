"""Pure chunking: page-aware, paragraph- and sentence-bounded (English and Chinese), with overlap."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

CONTENT_LIMIT = 16384  # the SparkTide item content limit; no chunk may exceed it
# Defaults chosen by measurement (docs/benchmarks.md "relevance"; fitted on SciFact train and DRCD dev): 2,000
# characters keep most abstracts and FAQ answers whole and stay inside the e5 model's 512-token window for English.
DEFAULT_SIZE = 2000
DEFAULT_OVERLAP = 100
_PARAGRAPHS = re.compile(r"\n\s*\n")
# A sentence ends at Chinese 。！？； (no space needed) or at . ! ? ; followed by white space.
_SENTENCES = re.compile(r"(?<=[。！？；])|(?<=[.!?;])\s+")
_CJK_STOPS = "。！？；"
_ID_OK = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")


@dataclass(frozen=True, slots=True)
class TextChunk:
    text: str
    page: int | None
    paragraph: int  # 1-based paragraph (of the page or section) where the chunk starts
    heading: str | None = None

    @property
    def locator(self) -> str:
        """Where the chunk starts, for a citation: `p.3 §2`, `Safety > Fire safety §1`, or `§4`."""
        where = f"p.{self.page}" if self.page is not None else self.heading
        return f"{where} §{self.paragraph}" if where else f"§{self.paragraph}"


def _sentences(paragraph: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(paragraph) if s and s.strip()]


def _join(sentences: list[tuple[str, int]]) -> str:
    """Sentences back into text: paragraphs apart by a blank line; within one, a space after Latin
    punctuation and none after Chinese."""
    parts: list[str] = []
    previous: tuple[str, int] | None = None
    for sentence, paragraph in sentences:
        if previous is not None:
            if paragraph != previous[1]:
                parts.append("\n\n")
            elif previous[0][-1] not in _CJK_STOPS:
                parts.append(" ")
        parts.append(sentence)
        previous = (sentence, paragraph)
    return "".join(parts)


def _hard_split(sentence: str, size: int) -> list[str]:
    return [sentence[i : i + size] for i in range(0, len(sentence), size)]


def split_text(
    text: str,
    *,
    size: int = DEFAULT_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    page: int | None = None,
    heading: str | None = None,
) -> list[TextChunk]:
    size = max(1, min(size, CONTENT_LIMIT))
    overlap = max(0, min(overlap, size // 2))
    text = text.strip()
    if len(text) <= size:
        # Fits whole: kept as written (most documents of a corpus of abstracts or FAQs).
        return [TextChunk(text, page, 1, heading)] if text else []
    pieces: list[tuple[str, int]] = []  # (sentence, paragraph number)
    for number, paragraph in enumerate(_PARAGRAPHS.split(text), start=1):
        for sentence in _sentences(paragraph):
            pieces.extend((part, number) for part in _hard_split(sentence, size))
    chunks: list[TextChunk] = []
    current: list[tuple[str, int]] = []
    length = 0
    for piece, number in pieces:
        joiner = 1 if current else 0
        if current and length + joiner + len(piece) > size:
            chunks.append(TextChunk(_join(current), page, current[0][1], heading))
            # Carry trailing sentences (up to `overlap` characters) into the next chunk for context.
            carried: list[tuple[str, int]] = []
            carried_len = 0
            for prev in reversed(current):
                if carried_len + len(prev[0]) + 1 > overlap:
                    break
                carried.insert(0, prev)
                carried_len += len(prev[0]) + 1
            current = carried
            length = max(0, carried_len - 1)
            joiner = 1 if current else 0
        current.append((piece, number))
        length += joiner + len(piece)
    if current:
        chunks.append(TextChunk(_join(current), page, current[0][1], heading))
    return chunks


def _component(text: str) -> str:
    """`%`, `:` and NUL percent-encoded, so components joined by `:` (or by NUL for the hash) cannot run into each
    other: document `a:b` version `c` and document `a` version `b:c` differ. Text without them is unchanged, so
    such ids stay what earlier releases wrote."""
    return text.replace("%", "%25").replace(":", "%3A").replace("\x00", "%00")


def chunk_id(document_id: str, version: str, position: int) -> str:
    """Deterministic, valid for every protocol's id rules (1–128 of [A-Za-z0-9_.:-], never . or ..), and one
    chunk's alone: `<document>:<version>:<position>` when that fits the rules, else `h-<hash>:<position>` (an
    encoded `%3A` never fits, so a readable id always has exactly two colons and a hashed one exactly one)."""
    document, version = _component(document_id), _component(version)
    raw = f"{document}:{version}:{position}"
    if _ID_OK.match(raw):
        return raw
    digest = hashlib.sha256(f"{document}\x00{version}".encode()).hexdigest()[:32]
    return f"h-{digest}:{position}"
