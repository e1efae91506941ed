"""Files → documents: .txt, .md, .html (text only: scripts, styles and the head dropped), .pdf (one section per
page, so chunks carry source.page) and .docx. Headings become the sections' heading paths (the chunk locator).
A file that cannot be read raises ReadError with a reason naming no content."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

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
    """(heading path, paragraph) blocks → one section per heading, paragraphs separated by blank lines."""
    sections: list[Section] = []
    for heading, paragraph in blocks:
        if sections and sections[-1].heading == heading:
            last = sections[-1]
            sections[-1] = Section(text=f"{last.text}\n\n{paragraph}", heading=heading)
        else:
            sections.append(Section(text=paragraph, heading=heading))
    return [s for s in sections if s.text.strip()]


_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


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
        match = _MD_HEADING.match(line)
        if match:
            flush()
            headings.enter(len(match.group(1)), match.group(2))
            title = title or match.group(2)
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
        self.title: str | None = None
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
            self.title = (self.title or "") + data.strip()
        elif not self._skip:
            self._buffer.append(data)


def read_html(data: bytes) -> tuple[str | None, list[Section]]:
    parser = _HtmlText()
    parser.feed(_text(data))
    parser.close()
    parser._flush()
    return parser.title or None, _sections(parser.blocks)


def read_text(data: bytes) -> tuple[str | None, list[Section]]:
    text = _text(data)
    return None, [Section(text=text)] if text.strip() else []


def read_pdf(data: bytes) -> tuple[str | None, list[Section]]:
    import io

    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

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
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        if isinstance(exc, ReadError):
            raise
        raise ReadError("not a readable PDF") from None
    return (str(title) if title else None), sections


def read_docx(data: bytes) -> tuple[str | None, list[Section]]:
    import io
    import zipfile

    import docx

    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ReadError("not a readable .docx") from exc
    headings = _Headings()
    title = document.core_properties.title or None
    blocks: list[tuple[str | None, str]] = []
    for paragraph in document.paragraphs:
        text = paragraph.text.strip()
        style = paragraph.style.name if paragraph.style is not None else ""
        if not text:
            continue
        if style == "Title":
            title = title or text
        elif style.startswith("Heading"):
            level = int(style.split()[-1]) if style.split()[-1].isdigit() else 1
            headings.enter(level, text)
            title = title or text
        else:
            blocks.append((headings.path, text))
    for table in document.tables:
        for row in table.rows:
            cells = " | ".join(cell.text.strip() for cell in row.cells if cell.text.strip())
            if cells:
                blocks.append((headings.path, cells))
    return title, _sections(blocks)


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
