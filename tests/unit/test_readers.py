"""Each file format → title and sections (committed fixtures under tests/fixtures/files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_provider.ingest.readers import ReadError, read_file
from es_provider.ingest.records import DocumentRecord, Section, SourceDocument
from es_provider.ingest.writer import chunk_documents

FILES = Path(__file__).resolve().parent.parent / "fixtures" / "files"


def test_pdf_has_one_section_per_page() -> None:
    title, sections, version = read_file(FILES / "manual.pdf")
    assert title == "Equipment manual" and len(version) == 12
    assert [s.page for s in sections] == [1, 2, 3]
    assert "anchor bolts" in sections[1].text
    assert sections[2].text.startswith("第三章 验收。")


def test_html_drops_scripts_styles_and_head() -> None:
    title, sections, _ = read_file(FILES / "page.html")
    text = " ".join(s.text for s in sections)
    assert title == "Cable routing notes"
    assert "do-not-index" not in text and "console.log" not in text and "color: red" not in text
    assert "Enable JavaScript" not in text
    assert "Power and data cables run in separate trays" in text
    assert [s.heading for s in sections] == ["Cable routing", "Cable routing > Labels"]


def test_markdown_heading_paths() -> None:
    title, sections, _ = read_file(FILES / "handbook.md")
    assert title == "Operations handbook"
    assert [s.heading for s in sections] == [
        "Operations handbook", "Operations handbook > Safety", "Operations handbook > Safety > Fire safety",
        "Operations handbook > 维护"]


def test_docx_headings_paragraphs_and_tables() -> None:
    title, sections, _ = read_file(FILES / "policy.docx")
    assert title == "Warranty policy"
    assert sections[0] == Section(text="设备自安装验收之日起保修两年。人为损坏不在保修范围内。", heading="保修政策")
    assert "Warranty: two years" in sections[-1].text


def test_text() -> None:
    title, sections, _ = read_file(FILES / "guide.txt")
    assert title is None and len(sections) == 1 and "power test" in sections[0].text


@pytest.mark.parametrize(("name", "reason"), [("broken.pdf", "PDF"), ("notes.xyz", "unsupported"),
                                              ("missing.txt", "cannot read")])
def test_unreadable_files_raise(name: str, reason: str) -> None:
    with pytest.raises(ReadError, match=reason):
        read_file(FILES / name)


def test_non_utf8_text_is_refused(tmp_path) -> None:
    path = tmp_path / "latin.txt"
    path.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ReadError, match="UTF-8"):
        read_file(path)


def test_chunks_never_cross_pages_and_carry_locators() -> None:
    _, sections, version = read_file(FILES / "manual.pdf")
    record = DocumentRecord(document_id="manual.pdf", content="", source={"version": version})
    chunks = chunk_documents(SourceDocument(record, tuple(sections)), size=60, overlap=0)
    assert {c["source"]["page"] for c in chunks} == {1, 2, 3}
    assert all(c["source"]["locator"].startswith(f"p.{c['source']['page']} §") for c in chunks)
    assert [c["position"] for c in chunks] == list(range(len(chunks)))
    assert all(c["chunk_id"] == f"manual.pdf:{version}:{c['position']}" for c in chunks)
