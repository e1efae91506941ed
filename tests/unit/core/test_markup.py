"""core/markup.py: markup residue (HTML tags, references, entities, comments, scripts) recognised and removed from
a text, and what only looks like markup (code's generics, comparisons, ampersands in names) left as it is."""

from __future__ import annotations

import pytest

from es_provider.core.markup import has_markup, strip_markup


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("第一段<br>第二段", "第一段 第二段"),
        ('台北<ref name="a1">source</ref>市', "台北 source 市"),
        ("<p>alpha</p><p>beta</p>", "alpha beta"),
        ("a &amp; b &lt;c&gt;", "a & b <c>"),
        ("x<!-- hidden -->y", "x y"),
        ("<script>alert(1)</script>text", "text"),
        ("<BR/>upper", "upper"),
        ("List<String> and Map<K, V>", "List<String> and Map<K, V>"),  # code, not markup
        ("a < b and c > d", "a < b and c > d"),
        ("AT&T and R&D", "AT&T and R&D"),
        ("plain text", "plain text"),
    ],
)
def test_strip_markup(text: str, clean: str) -> None:
    assert strip_markup(text) == clean
    assert has_markup(text) is (text != clean)
