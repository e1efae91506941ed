"""Hostile files built from the committed fixtures at test time (issue 27): a .docx with a part truncated, with
an entity expansion, with a style or table a reader once choked on; a PDF with an unknown stream filter. Used by
tests/unit/ingest/test_readers.py and the hostile-ingest suite."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

FILES = Path(__file__).resolve().parent.parent / "fixtures" / "files"


def docx_with(*, replace: dict[str, tuple[bytes, bytes]] | None = None, parts: dict[str, bytes] | None = None,
              drop: tuple[str, ...] = (), method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """policy.docx with (old → new) replaced in some parts, parts overwritten or dropped."""
    source = zipfile.ZipFile(FILES / "policy.docx")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as archive:
        for item in source.infolist():
            if item.filename in drop:
                continue
            data = (parts or {}).get(item.filename, source.read(item.filename))
            if item.filename in (replace or {}):
                old, new = (replace or {})[item.filename]
                assert old in data
                data = data.replace(old, new)
            archive.writestr(item.filename, data)
    return out.getvalue()


def document_xml(body: str) -> bytes:
    """policy.docx's word/document.xml with its body's paragraphs replaced by `body`."""
    xml = zipfile.ZipFile(FILES / "policy.docx").read("word/document.xml").decode()
    start, end = xml.index("<w:body>") + len("<w:body>"), xml.index("<w:sectPr")
    return (xml[:start] + body + xml[end:]).encode()


def truncated_docx() -> bytes:
    xml = zipfile.ZipFile(FILES / "policy.docx").read("word/document.xml")
    return docx_with(parts={"word/document.xml": xml[: len(xml) // 2]})


def entity_expansion_docx() -> bytes:
    laughs = ['<!ENTITY lol "lol">'] + [f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
                                        for i in range(1, 10)]
    xml = document_xml('<w:p><w:r><w:t>&lol9;</w:t></w:r></w:p>').decode()
    xml = xml.replace("<w:document ", f"<!DOCTYPE w:document [{''.join(laughs)}]><w:document ", 1)
    return docx_with(parts={"word/document.xml": xml.encode()})


def corrupt_deflate_docx() -> bytes:
    data = bytearray(docx_with())
    start = data.index(b"word/document.xml") + len(b"word/document.xml")  # the local header's name, then data
    data[start + 40 : start + 60] = bytes(range(20))
    return bytes(data)


def superscript_heading() -> bytes:
    """A style named `Heading ²`: "²".isdigit() is True, yet int("²") raises."""
    return docx_with(replace={"word/styles.xml": (b'<w:name w:val="heading 2"/>', '<w:name w:val="Heading ²"/>'
                                                  .encode())})


def unknown_filter_pdf() -> bytes:
    """manual.pdf with a stream filter pypdf does not know (it raises NotImplementedError)."""
    return (FILES / "manual.pdf").read_bytes().replace(b"/ASCII85Decode", b"/ASCII85Decodx", 1)


def table_xml(rows: list[list[tuple[str, str]]]) -> str:
    """A <w:tbl> of rows of (cell properties XML, text) cells."""
    def cell(properties: str, text: str) -> str:
        paragraph = f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>" if text else "<w:p/>"
        return f"<w:tc><w:tcPr>{properties}</w:tcPr>{paragraph}</w:tc>"

    body = "".join("<w:tr>" + "".join(cell(*c) for c in row) + "</w:tr>" for row in rows)
    return f'<w:tbl><w:tblGrid><w:gridCol w:w="1"/><w:gridCol w:w="1"/><w:gridCol w:w="1"/></w:tblGrid>{body}</w:tbl>'
