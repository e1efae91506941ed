"""Files → documents: .txt, .md, .html (text only: scripts, styles and the head dropped), .pdf (one section per
page, so chunks carry source.page) and .docx. Headings become the sections' heading paths (the chunk locator).
A file that cannot be read raises ReadError with a reason naming no content: each reader maps what its parser
library raises for a malformed file (never a broad `except Exception`), so one bad file is that file's failure.
Our steps are linear in the file's size (html.parser's own are not, on some malformed markup: see the README)."""

from __future__ import annotations

import functools
import hashlib
import io
import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from es_provider.ingest.records import Section

SUPPORTED = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx")


class ReadError(ValueError):
    pass


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ReadError("not UTF-8 text") from None


class _Headings:
    """A heading path (level → title) that deeper headings extend and shallower ones cut."""

    def __init__(self) -> None:
        self._stack: list[tuple[int, str]] = []

    def enter(self, level: int, title: str) -> None:
        self._stack = [(lvl, t) for lvl, t in self._stack if lvl < level]
        self._stack.append((level, title))

    @property
    def path(self) -> str | None:
        return " > ".join(t for _, t in self._stack) or None


def _sections(blocks: list[tuple[str | None, str]]) -> list[Section]:
    """(heading path, paragraph) blocks → one section per heading, paragraphs separated by blank lines. Each
    section's paragraphs are joined once (appending to the text paragraph by paragraph was quadratic)."""
    groups: list[tuple[str | None, list[str]]] = []
    for heading, paragraph in blocks:
        if groups and groups[-1][0] == heading:
            groups[-1][1].append(paragraph)
        else:
            groups.append((heading, [paragraph]))
    sections = (Section(text="\n\n".join(paragraphs), heading=heading) for heading, paragraphs in groups)
    return [s for s in sections if s.text.strip()]


def markdown_heading(line: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line (`## Title ##`), else None. Plain string steps: the former pattern
    `\\s+(.*?)\\s*#*\\s*$` backtracked cubically on a long run of spaces (5,000 took minutes). A closing run of
    `#` counts only after white space (CommonMark), so `# C#` is titled `C#`."""
    level = len(line) - len(line.lstrip("#"))
    if not 1 <= level <= 6 or len(line) == level or not line[level].isspace():
        return None
    title = line[level:].strip()
    unclosed = title.rstrip("#")
    if not unclosed or unclosed[-1].isspace():
        title = unclosed.rstrip()
    return level, title


def read_markdown(data: bytes) -> tuple[str | None, list[Section]]:
    headings = _Headings()
    title: str | None = None
    blocks: list[tuple[str | None, str]] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            blocks.append((headings.path, " ".join(paragraph)))
            paragraph.clear()

    for line in _text(data).splitlines():
        heading = markdown_heading(line)
        if heading is not None:
            flush()
            headings.enter(*heading)
            title = title or heading[1]
        elif line.strip():
            paragraph.append(line.strip())
        else:
            flush()
    flush()
    return title, _sections(blocks)


class _HtmlText(HTMLParser):
    SKIP = frozenset({"script", "style", "noscript", "template", "head", "svg", "iframe", "object"})
    BLOCK = frozenset({"p", "div", "li", "tr", "br", "section", "article", "blockquote", "pre", "td", "th",
                       "dd", "dt", "table", "ul", "ol", "main", "header", "footer", "nav", "aside", "form"})
    HEADINGS: ClassVar[dict[str, int]] = {f"h{i}": i for i in range(1, 7)}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.titles: list[str] = []  # the <title>'s text pieces, joined once
        self.blocks: list[tuple[str | None, str]] = []
        self._headings = _Headings()
        self._skip = 0
        self._in_title = False
        self._heading_level: int | None = None
        self._buffer: list[str] = []

    def _flush(self) -> None:
        text = re.sub(r"\s+", " ", "".join(self._buffer)).strip()
        self._buffer = []
        if not text:
            return
        if self._heading_level is not None:
            self._headings.enter(self._heading_level, text)
        else:
            self.blocks.append((self._headings.path, text))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in self.SKIP:
            self._skip += 1
        elif tag in self.HEADINGS:
            self._flush()
            self._heading_level = self.HEADINGS[tag]
        elif tag in self.BLOCK:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in self.HEADINGS:
            self._flush()
            self._heading_level = None
        elif tag in self.BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.titles.append(data.strip())
        elif not self._skip:
            self._buffer.append(data)


def read_html(data: bytes) -> tuple[str | None, list[Section]]:
    parser = _HtmlText()
    text = _text(data)
    try:
        parser.feed(text)
        parser.close()
    except AssertionError:
        # html.parser (3.11) asserts on a marked section it does not know (`<![foo[`): the file's fault, not ours.
        raise ReadError("not readable HTML (malformed markup declaration)") from None
    parser._flush()
    return "".join(parser.titles) or None, _sections(parser.blocks)


def read_text(data: bytes) -> tuple[str | None, list[Section]]:
    text = _text(data)
    return None, [Section(text=text)] if text.strip() else []


def read_pdf(data: bytes) -> tuple[str | None, list[Section]]:
    import struct
    import zlib

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    # What pypdf raises for a malformed file: its own errors (a reference loop is LimitReachedError), and the
    # builtins it lets through from damaged structures (fuzzed: an unknown stream filter is NotImplementedError,
    # an object of the wrong kind AttributeError or TypeError).
    malformed = (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, NotImplementedError,
                 OSError, zlib.error, struct.error, RecursionError)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ReadError("encrypted PDF")
        title = reader.metadata.title if reader.metadata else None
        sections = []
        for number, page in enumerate(reader.pages, start=1):
            text = page.extract_text() or ""
            # Lines of one paragraph come back one per line; blank lines still separate paragraphs.
            text = re.sub(r"(?<!\n)\n(?!\n)", " ", text).strip()
            if text:
                sections.append(Section(text=text, page=number))
    except ReadError:
        raise
    except malformed:
        raise ReadError("not a readable PDF") from None
    return (str(title) if title else None), sections


_HEADING_STYLE = re.compile(r"Heading ([1-9])")


def heading_level(style: str) -> int | None:
    """The level of a Word heading style (`Heading 2` → 2, any other `Heading…` → 1), None for other styles. Never
    raises: a style named `Heading ²` passed `isdigit()` and then failed `int()`, ending the whole run."""
    if not style.startswith("Heading"):
        return None
    match = _HEADING_STYLE.fullmatch(style)
    return int(match.group(1)) if match else 1


def read_docx(data: bytes) -> tuple[str | None, list[Section]]:
    title, paragraphs, rows = _docx_content(data)
    headings = _Headings()
    blocks: list[tuple[str | None, str]] = []
    for style, text in paragraphs:
        level = heading_level(style)
        if style == "Title":
            title = title or text
        elif level is not None:
            headings.enter(level, text)
            title = title or text
        else:
            blocks.append((headings.path, text))
    blocks.extend((headings.path, row) for row in rows)
    return title, _sections(blocks)


def _docx_content(data: bytes) -> tuple[str | None, list[tuple[str, str]], list[str]]:
    """What python-docx reads of a .docx: the title property, (style name, text) of each paragraph with text, and
    each table row's cells joined. What the libraries under it raise for a malformed package is a ReadError."""
    import zipfile
    import zlib

    import docx
    from docx.exceptions import PythonDocxError
    from docx.opc.exceptions import OpcError
    from lxml.etree import LxmlError  # type: ignore[import-untyped]  # no stubs; only this class is used

    try:
        return _docx_parts(docx.Document(io.BytesIO(data)))
    except LxmlError:  # not well-formed, or refused by lxml (entity expansion, excessive depth)
        raise ReadError("not a readable .docx (malformed XML)") from None
    except (zipfile.BadZipFile, OpcError, zlib.error, EOFError, NotImplementedError):
        raise ReadError("not a readable .docx (damaged or unsupported zip package)") from None
    except (PythonDocxError, KeyError, ValueError, AttributeError, TypeError):
        # python-docx's reaction to a missing part or an element of an unexpected kind (a renamed root element
        # has no `title_text`, a renamed <Relationships> no `Relationship_lst`): the file's fault. _docx_parts is
        # thin glue over python-docx; a mistake of ours there would fail every .docx, the fixtures' too.
        raise ReadError("not a readable .docx (missing or invalid part)") from None


# Paragraphs whose text is more than white space (python-docx's Paragraph.text: the runs' w:t text, tabs, breaks
# and non-breaking hyphens), chosen by libxml2 in one compiled XPath: a Python step per paragraph costs ~5 µs even
# to skip an empty one, and a .docx of 1.4 M empty paragraphs is 49 KB.
_TEXT_PARAGRAPHS = "./w:p[(w:r | w:hyperlink/w:r)[w:t[normalize-space()] or w:noBreakHyphen]]"


@functools.cache
def _text_paragraphs() -> Callable[[Any], list[Any]]:
    from docx.oxml.ns import nsmap
    from lxml.etree import XPath  # untyped like every lxml import here (mypy flags only the first)

    select: Callable[[Any], list[Any]] = XPath(_TEXT_PARAGRAPHS, namespaces={"w": nsmap["w"]})
    return select


def _docx_parts(document: Any) -> tuple[str | None, list[tuple[str, str]], list[str]]:
    from docx.text.paragraph import Paragraph

    # A style name is resolved once per style id: python-docx resolves a paragraph without one by scanning every
    # style for the default (2.5 ms a paragraph here: 1.4 M empty paragraphs, about an hour).
    names: dict[str | None, str] = {}
    paragraphs: list[tuple[str, str]] = []
    body = document.element.body
    for element, text in _paragraph_texts(body, document):
        if element.style not in names:
            style = Paragraph(element, document).style
            names[element.style] = (style.name or "") if style is not None else ""
        paragraphs.append((names[element.style], text))
    rows = [row for table in body.tbl_lst for row in _table_rows(table, document)]
    return document.core_properties.title or None, paragraphs, rows


def _paragraph_texts(parent: Any, document: Any) -> Iterator[tuple[Any, str]]:
    """(element, stripped text) of `parent`'s paragraphs with text."""
    from docx.text.paragraph import Paragraph

    for element in _text_paragraphs()(parent):
        text = Paragraph(element, document).text.strip()
        if text:
            yield element, text


def _table_rows(table: Any, document: Any) -> Iterator[str]:
    """Each row's cells with text, joined by ` | `. A cell continuing a vertical merge reads as the cell it
    continues (as python-docx's Row.cells reads it), found here in one pass: python-docx walks up row by row,
    recursively (a 500-row merged column took 28 s, 1,000 rows raised RecursionError). A cell spanning columns
    counts once (Row.cells repeats it per column)."""
    above: dict[int, str] = {}  # grid column → the text of the last cell there that was not a continuation
    for row in table.tr_lst:
        offset = row.grid_before
        cells = []
        for cell in row.tc_lst:
            if cell.vMerge == "continue":
                text = above.get(offset, "")
            else:
                text = "\n".join(t for _, t in _paragraph_texts(cell, document))
                above[offset] = text
            if text:
                cells.append(text)
            offset += cell.grid_span
        if cells:
            yield " | ".join(cells)


READERS: dict[str, Callable[[bytes], tuple[str | None, list[Section]]]] = {
    ".txt": read_text,
    ".md": read_markdown,
    ".markdown": read_markdown,
    ".html": read_html,
    ".htm": read_html,
    ".pdf": read_pdf,
    ".docx": read_docx,
}


def read_file(path: Path) -> tuple[str | None, list[Section], str]:
    """(title, sections, version) of a supported file; the version is a hash of its bytes."""
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise ReadError(f"unsupported file type {path.suffix or '(none)'}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReadError(f"cannot read: {exc.strerror}") from None
    title, sections = reader(data)
    if not sections:
        raise ReadError("no text found")
    return title, sections, hashlib.sha256(data).hexdigest()[:12]
