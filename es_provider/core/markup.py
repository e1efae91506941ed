"""Pure: markup residue in text (`<br>`, `<ref name=…>`, `<p>`, `&amp;`…) recognised and removed.

"Content is not HTML" (the SparkTide item rule) means no document or attachment in HTML reaches a platform; a
stray tag in otherwise plain text is residue of an export (Wikipedia's `<ref>`, a `<br>` in a CSV cell), not an
HTML document. So residue is removed where text enters (ingest) and repaired where it leaves (answers), and only
text with nothing readable left is refused. Only tags of HTML and wiki markup count: `List<String>` or `a < b > c`
in prose or code are text and stay as they are.
"""

from __future__ import annotations

import html
import re

TAG_NAMES = (
    "a", "abbr", "b", "big", "blockquote", "body", "br", "caption", "center", "cite", "code", "col", "colgroup",
    "dd", "del", "div", "dl", "dt", "em", "font", "h1", "h2", "h3", "h4", "h5", "h6", "head", "hr", "html", "i",
    "img", "ins", "kbd", "li", "link", "meta", "nowiki", "ol", "p", "pre", "q", "ref", "references", "s", "script",
    "small",
    "span", "strike", "strong", "style", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "title", "tr",
    "tt", "u", "ul", "wbr",
)
_NAMES = frozenset(TAG_NAMES)
# Blocks and scripts whose content is not text at all.
_DROPPED = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# Any tag-shaped run; it is markup when its name is one of TAG_NAMES (a set lookup is cheaper than a regex of them).
_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9]*)(?:\s[^<>]*)?/?>")
_ENTITY = re.compile(r"&(?:[A-Za-z]{2,8}|#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6});")
_SPACES = re.compile(r"[ \t\u00a0]{2,}")
_BLANK_LINES = re.compile(r"\n\s*\n\s*\n+")


def _markup_at(text: str, at: int) -> bool:
    if text.startswith("<!--", at):
        return True
    tag = _TAG.match(text, at)
    return tag is not None and tag.group(1).lower() in _NAMES


def _tag_to_space(match: re.Match[str]) -> str:
    return " " if match.group(1).lower() in _NAMES else match.group(0)


def has_markup(text: str) -> bool:
    """Tried only where str.find puts a "<" or "&" (the regex engine alone would try every position of every hit's
    text, on the path of every answer)."""
    at = text.find("<")
    while at != -1:
        if _markup_at(text, at):
            return True
        at = text.find("<", at + 1)
    at = text.find("&")
    while at != -1:
        if _ENTITY.match(text, at):
            return True
        at = text.find("&", at + 1)
    return False


def strip_markup(text: str) -> str:
    """The text without markup: tags become a space, entities their characters, runs of spaces one."""
    if not has_markup(text):
        return text
    cleaned = _COMMENT.sub(" ", _DROPPED.sub(" ", text))
    cleaned = html.unescape(_TAG.sub(_tag_to_space, cleaned))
    cleaned = _BLANK_LINES.sub("\n\n", _SPACES.sub(" ", cleaned))
    return "\n".join(line.strip() for line in cleaned.split("\n")).strip()
