"""Each file format → title and sections (committed fixtures under tests/fixtures/files)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers.hostile_files import (
    corrupt_deflate_docx,
    document_xml,
    docx_with,
    entity_expansion_docx,
    superscript_heading,
    table_xml,
    truncated_docx,
    unknown_filter_pdf,
)

from es_provider.ingest.readers import (
    ReadError,
    heading_level,
    markdown_heading,
    read_docx,
    read_file,
    read_html,
    read_markdown,
    read_pdf,
)
from es_provider.ingest.records import Section

FILES = Path(__file__).resolve().parents[2] / "fixtures" / "files"


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


# --- hostile files (issue 27): a bad file is a ReadError naming the reason, never an exception that ends the run ---

@pytest.mark.parametrize(("make", "reason"), [
    (truncated_docx, "malformed XML"),
    (entity_expansion_docx, "malformed XML"),
    (lambda: docx_with(replace={"docProps/core.xml": (b"cp:coreProperties", b"cp:somethingElse")}),
     "not a readable .docx"),
    (lambda: docx_with(replace={"word/_rels/document.xml.rels": (b"<Relationships", b"<Nothing")}),
     "not a readable .docx"),
    (lambda: docx_with(drop=("word/document.xml",)), "not a readable .docx"),
    (corrupt_deflate_docx, "not a readable .docx"),
    (lambda: docx_with()[:2000], "not a readable .docx"),
    (lambda: b"plain text, not a zip", "not a readable .docx"),
])
def test_malformed_docx_is_a_read_error(make, reason: str) -> None:
    with pytest.raises(ReadError, match=reason):
        read_docx(make())


def test_a_heading_style_with_a_superscript_digit_is_still_read() -> None:
    # "²".isdigit() is True, yet int("²") raises: the file must still be read, the heading at level 1.
    _, sections = read_docx(superscript_heading())
    assert [s.heading for s in sections] == ["保修政策", "Exclusions"]


@pytest.mark.parametrize(("style", "level"), [
    ("Heading 1", 1), ("Heading 6", 6), ("Heading 9", 9), ("Heading", 1), ("Heading ²", 1), ("Heading ٣", 1),
    ("Heading 1x", 1), ("Heading " + "9" * 5000, 1), ("Heading -1", 1), ("Heading 0", 1), ("Normal", None),
    ("Title", None), ("", None), ("heading 2", None),
])
def test_heading_level_never_raises(style: str, level: int | None) -> None:
    assert heading_level(style) == level


def test_pdf_with_an_unsupported_filter_is_a_read_error() -> None:
    with pytest.raises(ReadError, match="not a readable PDF"):
        read_pdf(unknown_filter_pdf())


def test_html_with_a_bad_marked_section_is_a_read_error() -> None:
    with pytest.raises(ReadError, match="HTML"):
        read_html(b"<p>before</p><![foo[ x ]]><p>after</p>")


@pytest.mark.parametrize(("line", "heading"), [
    ("# Title", (1, "Title")), ("###### Six", (6, "Six")), ("####### Seven", None), ("#NoSpace", None),
    ("# Closed ##", (1, "Closed")), ("# C#", (1, "C#")), ("#  Spaced  #  ", (1, "Spaced")), ("# ###", (1, "")),
    ("# ", (1, "")), ("#", None), ("text # not", None), ("#\tTab", (1, "Tab")),
])
def test_markdown_headings(line: str, heading: tuple[int, str] | None) -> None:
    assert markdown_heading(line) == heading


# --- linear time (issue 27): sections were built by repeated string concatenation, quadratic in paragraphs ---

def best_time(work, rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        started = time.process_time()  # CPU, not wall time: other processes' load does not count
        work()
        times.append(time.process_time() - started)
    return min(times)


# Long paragraphs: the quadratic cost was in copying the section's text, so it shows at sizes that stay fast now.
FILLER = "x" * 1000


def markdown(paragraphs: int) -> bytes:
    return ("# Handbook\n\n" + "".join(f"Paragraph {i} {FILLER}.\n\n" for i in range(paragraphs))).encode()


def html(paragraphs: int) -> bytes:
    return ("<title>Handbook</title><h1>Handbook</h1>"
            + "".join(f"<p>Paragraph {i} {FILLER}.</p>\n" for i in range(paragraphs))).encode()


@pytest.mark.timing  # a ratio of two timings: run alone, after the parallel run
@pytest.mark.parametrize(("reader", "make"), [(read_markdown, markdown), (read_html, html)])
def test_reading_is_linear_in_paragraphs(reader, make) -> None:
    # Both sizes outgrow the CPU caches (below about 1 MB a paragraph costs a third as much, so a small input made a
    # linear reader look superlinear: 10.9x at 4x was measured alone on a quiet machine). 8x the paragraphs: linear
    # 4-27x measured here under load, the quadratic readers before the fix 53-183x.
    small, large = make(2_000), make(16_000)
    ratio = best_time(lambda: reader(large), rounds=5) / best_time(lambda: reader(small), rounds=5)
    assert ratio < 40, f"8x the paragraphs took {ratio:.1f}x the time"


def test_a_docx_of_empty_paragraphs_reads_fast() -> None:
    # Each paragraph's style was resolved by scanning all styles (2.5 ms each: 1.4 M empty paragraphs, about an hour).
    data = docx_with(parts={"word/document.xml": document_xml(
        "<w:p><w:r><w:t>Start.</w:t></w:r></w:p>" + "<w:p/>" * 1_400_000 + "<w:p><w:r><w:t>End.</w:t></w:r></w:p>")})
    started = time.perf_counter()
    _, sections = read_docx(data)
    assert time.perf_counter() - started < 15  # about 1.5 s here (before: about an hour)
    assert sections[0].text == "Start.\n\nEnd."


def test_a_markdown_heading_line_of_spaces_reads_fast() -> None:
    # The heading pattern `\s+(.*?)\s*#*\s*$` backtracked cubically: 5,000 spaces took minutes.
    started = time.perf_counter()
    _, sections = read_markdown(("# a" + " " * 100_000 + "x\n\nText.").encode())
    assert time.perf_counter() - started < 1
    assert sections == [Section(text="Text.", heading="a" + " " * 100_000 + "x")]


def test_table_cells_merged_down_read_as_the_cell_they_continue() -> None:
    table = table_xml([[('<w:vMerge w:val="restart"/>', "Pumps"), ("", "P-1")], [("<w:vMerge/>", ""), ("", "P-2")],
                       [('<w:gridSpan w:val="2"/>', "Spanning two columns"), ("", "third")]])
    _, sections = read_docx(docx_with(parts={"word/document.xml": document_xml(table)}))
    assert sections == [Section(text="Pumps | P-1\n\nPumps | P-2\n\nSpanning two columns | third")]


def test_a_long_column_merged_down_reads_fast() -> None:
    # python-docx found the cell a merge continues by walking up row by row, recursively: 500 rows took 28 s,
    # 1,000 raised RecursionError (an exception no reader mapped, ending the run).
    rows = [[('<w:vMerge w:val="restart"/>', "top"), ("", "b0")]] + [[("<w:vMerge/>", ""), ("", f"b{i}")]
                                                                    for i in range(1, 3000)]
    data = docx_with(parts={"word/document.xml": document_xml(table_xml(rows))})
    started = time.perf_counter()
    _, sections = read_docx(data)
    assert time.perf_counter() - started < 3
    assert sections[0].text.endswith("top | b2998\n\ntop | b2999")
