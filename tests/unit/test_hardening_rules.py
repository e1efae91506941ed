"""Unit tables for the hardening findings that are pure logic (the HTTP-level ones are in
tests/integration/test_hardening.py)."""

from __future__ import annotations

import pytest

from es_provider.search.query import MAX_QUERY_UNITS, bounded_text, text_fields

# --- finding 4: the query bound counts what the analyzers produce ---

@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("\U00020000" * 520, 200),  # CJK Extension B: one term per character
        ("\U00030000" * 300, 200),  # Extension G (tertiary plane)
        ("中" * 300, 200), ("ひらがな" * 100, 200), ("カタカナ" * 100, 200), ("한국어" * 100, 200),
        ("ｶﾀｶﾅ" * 100, 200),  # half-width katakana
        ("a中" * 300, 200),  # alternating scripts: every character is its own term
        ("word " * 300, 200 * 5 - 1),
        ("x" * 600, 600),  # one long run: 3 terms (the tokenizer cuts at 255)
    ],
)
def test_query_bound_counts_terms(text: str, kept: int) -> None:
    assert len(bounded_text(text)) == kept


def test_supplementary_ideographs_use_the_cjk_fields() -> None:
    assert "content.cjk" in text_fields("\U00020000")
    assert "content.cjk" not in text_fields("plain words")
    assert MAX_QUERY_UNITS * len(text_fields("中")) < 1024
