"""The walk-throughs the docs show, read as a reader reads them, and the rule a shown answer is held to. Pure: no
engine, no process; tests/integration/test_docs_answers.py runs what this finds, tests/repo/test_doc_walk.py
holds the reading and the rule to tables.

What is a command, and what is its answer:
- A command is a line of a ```bash (sh, shell) block, continued over a trailing backslash and over an open quote
  (the curls' JSON bodies span lines inside single quotes); whole-line comments between commands are not commands.
- Its answer is shown either as `# {...}` comment lines right after it (the first starting with `{` or `[`, every
  following line starting with `#`), or as a ```json block after the block it ends (only prose between).
- A ```json block after prose whose last inline code span is an `es-provider …` command is that command's answer
  (docs/platforms.md: "the JSON that `es-provider manifest …` prints").

How a shown answer is compared with the real one (`mismatches`), field by field:
- Everything shown is compared: every key, every list item in order, every string and number, true/false/null.
- An elision (`…` or `...`) hides what it stands for, and stands for something (an answer with nothing where the
  doc shows `…` is not the answer shown: "several records shown, one answered"), in three places:
  - the last item of a list: the real list has the items shown first, then one or more (without it: exactly those);
  - a member of an object (`{"a": 1, ...}`): the real object has the keys shown and one or more others (without
    it: exactly those keys);
  - the end of a string (`"第一章 总则。…"`, `"... online. ..."`): the real string starts with the text before it
    (that text's trailing spaces ignored) and goes on; a string that is only an elision is any non-empty string.
  An elision anywhere else (mid-list, mid-string) is refused: it would hide what follows it.
- A number with a fraction is compared to its shown precision: `0.639` matches a real x when round(x, 3) == 0.639;
  a number without one (`2025`) is an integer and must be that integer.
- Objects' key order is not compared (JSON's objects are unordered); lists' order is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

ELISIONS = ("…", "...")
# What a bare elision becomes so that the shown text parses as JSON: a list item, or an object member's key.
ELIDED = "\u0000elided\u0000"
SHELL_LANGUAGES = {"bash", "sh", "shell"}
_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int  # the line of the block's first content line (1-based, in the whole file)
    prose: str  # the text between the previous block (or the section's start) and this one


@dataclass(frozen=True)
class Example:
    """A command the docs show, where, and the answer shown for it (None: none shown)."""

    command: str
    line: int
    answer: str | None = None
    answer_line: int | None = None


def section(markdown: str, heading: str | None) -> tuple[str, int]:
    """The text under `heading` (a heading's exact text, without its #s) up to the next heading of the same or a
    higher level, and the line number before its first line; the whole file for None. Headings inside fenced blocks
    are not headings."""
    lines = markdown.split("\n")
    if heading is None:
        return markdown, 0
    fenced, start, level = False, None, 0
    for number, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        found = None if fenced else _HEADING.match(line)
        if found is None:
            continue
        if start is None and found.group(2) == heading:
            start, level = number + 1, len(found.group(1))
        elif start is not None and len(found.group(1)) <= level:
            return "\n".join(lines[start:number]), start
    if start is None:
        raise ValueError(f"no heading {heading!r}")
    return "\n".join(lines[start:]), start


def blocks(markdown: str, first_line: int = 0) -> list[Block]:
    """The fenced blocks of `markdown`, in order; `first_line`: the line number before its first line."""
    found: list[Block] = []
    lines = markdown.split("\n")
    prose: list[str] = []
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if opening is None:
            prose.append(lines[number])
            number += 1
            continue
        fence, lang = opening.group(1), opening.group(2).lower()
        end = number + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        if end == len(lines):
            raise ValueError(f"line {first_line + number + 1}: a block that is never closed")
        found.append(Block(lang, "\n".join(lines[number + 1:end]), first_line + number + 2, "\n".join(prose)))
        prose = []
        number = end + 1
    return found


def _scan(line: str, quote: str | None) -> tuple[str | None, bool]:
    """The quote still open at the end of `line` (given the one open at its start), and whether the line ends in
    a backslash that continues it (outside quotes and comments)."""
    index = 0
    while index < len(line):
        char = line[index]
        if quote == "'":
            if char == "'":
                quote = None
        elif quote == '"':
            if char == "\\":
                index += 1
            elif char == '"':
                quote = None
        elif char == "\\":
            if index == len(line) - 1:
                return None, True
            index += 1
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return None, False
        index += 1
    return quote, False


def _is_answer_start(line: str) -> bool:
    return line.startswith("#") and line[1:].lstrip().startswith(("{", "["))


def shell_examples(block: Block) -> list[Example]:
    """The commands of a shell block, each with the `# {...}` answer right after it, if any."""
    lines = block.text.split("\n")
    examples: list[Example] = []
    index = 0
    while index < len(lines):
        if not lines[index].strip() or lines[index].lstrip().startswith("#"):
            index += 1
            continue
        start = index
        quote, continued = _scan(lines[index], None)
        while (quote is not None or continued) and index + 1 < len(lines):
            index += 1
            quote, continued = _scan(lines[index], quote)
        if quote is not None:
            raise ValueError(f"line {block.line + start}: a quote that is never closed")
        command = "\n".join(lines[start:index + 1])
        index += 1
        answer, answer_line = None, None
        if index < len(lines) and _is_answer_start(lines[index]):
            answer_line = block.line + index
            shown = []
            while index < len(lines) and lines[index].startswith("#"):
                shown.append(lines[index][1:])
                index += 1
            answer = "\n".join(shown)
        examples.append(Example(command, block.line + start, answer, answer_line))
    return examples


def examples(markdown: str, heading: str | None = None) -> list[Example]:
    """Every command shown under `heading` (the whole file for None), with the answer shown for it, in order."""
    text, first_line = section(markdown, heading)
    found: list[Example] = []
    previous: Block | None = None
    for block in blocks(text, first_line):
        if block.lang in SHELL_LANGUAGES:
            found.extend(shell_examples(block))
        elif block.lang == "json":
            if previous is not None and previous.lang in SHELL_LANGUAGES and found:
                last = found[-1]
                if last.answer is not None:
                    raise ValueError(f"line {block.line}: a second answer for the command at line {last.line}")
                found[-1] = Example(last.command, last.line, block.text, block.line)
            else:
                spans = [span for span in _INLINE_CODE.findall(block.prose) if span.startswith("es-provider ")]
                if spans:
                    found.append(Example(spans[-1], block.line - 1, block.text, block.line))
        previous = block
    return found


class Shown(float):
    """A number with a fraction as the doc wrote it: compared to the precision it is written with."""

    text: str

    def __new__(cls, text: str) -> Shown:
        value = super().__new__(cls, text)
        value.text = text
        return value

    @property
    def places(self) -> int | None:
        """Digits after the point; None for an exponent (compared exactly)."""
        if "e" in self.text.lower():
            return None
        return len(self.text.split(".", 1)[1]) if "." in self.text else 0


def parse_shown(text: str) -> Any:
    """A shown answer as a value: JSON whose bare elisions become ELIDED (a list item, or an object member's key
    with the value null); numbers with a fraction become Shown."""
    out: list[str] = []
    stack: list[str] = []
    index, in_string = 0, False
    while index < len(text):
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\":
                out.append(text[index + 1])
                index += 1
            elif char == '"':
                in_string = False
            index += 1
            continue
        elision = next((e for e in ELISIONS if text.startswith(e, index)), None)
        if elision is not None:
            if not stack:
                raise ValueError(f"an elision outside any object or list: {text[:60]!r}")
            out.append(json.dumps(ELIDED) + (": null" if stack[-1] == "{" else ""))
            index += len(elision)
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append(char)
        elif char in "}]":
            stack.pop()
        out.append(char)
        index += 1
    return json.loads("".join(out), parse_float=Shown)


def _elided_string(shown: str) -> str | None:
    """The prefix a string ending in an elision asks for, else None; refuses an elision inside a string."""
    for elision in ELISIONS:
        if shown.endswith(elision):
            return shown[: -len(elision)].rstrip()
    return None


def mismatches(shown: Any, actual: Any, path: str = "$") -> list[str]:
    """Where `actual` differs from the shown answer (parse_shown's value), by the rule above; [] when it matches."""
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return [f"{path}: shown an object, answered {_brief(actual)}"]
        elided = ELIDED in shown
        problems = []
        for key, value in shown.items():
            if key == ELIDED:
                if value is not None:
                    raise ValueError(f"{path}: an elided member with a value")
                continue
            if key not in actual:
                problems.append(f"{path}.{key}: shown, not answered")
            else:
                problems += mismatches(value, actual[key], f"{path}.{key}")
        hidden = [key for key in actual if key not in shown]
        if not elided:
            problems += [f"{path}.{key}: answered, not shown (end the object with … to elide it)" for key in hidden]
        elif not hidden:
            problems.append(f"{path}: shown with …, but no other key answered")
        return problems
    if isinstance(shown, list):
        if not isinstance(actual, list):
            return [f"{path}: shown a list, answered {_brief(actual)}"]
        if ELIDED in shown[:-1]:
            raise ValueError(f"{path}: an elision is a list's last item only")
        elided = bool(shown) and shown[-1] == ELIDED
        items = shown[:-1] if elided else shown
        problems = []
        if (len(actual) <= len(items)) if elided else (len(actual) != len(items)):
            problems.append(f"{path}: {len(items)}{' and more (…)' if elided else ''} items shown, "
                            f"{len(actual)} answered")
        for number, (want, got) in enumerate(zip(items, actual, strict=False)):
            problems += mismatches(want, got, f"{path}[{number}]")
        return problems
    if isinstance(shown, str):
        prefix = _elided_string(shown)
        for elision in ELISIONS:
            if elision in (shown if prefix is None else prefix):
                raise ValueError(f"{path}: an elision inside a string hides what follows it: {shown!r}")
        if not isinstance(actual, str):
            return [f"{path}: shown {shown!r}, answered {_brief(actual)}"]
        if prefix is None:
            return [] if actual == shown else [f"{path}: shown {shown!r}, answered {actual!r}"]
        goes_on = actual.startswith(prefix) and len(actual.rstrip()) > len(prefix)
        return [] if goes_on else [f"{path}: shown {shown!r}, answered {actual!r}"]
    if isinstance(shown, Shown):
        if isinstance(actual, bool) or not isinstance(actual, int | float):
            return [f"{path}: shown {shown.text}, answered {_brief(actual)}"]
        places = shown.places
        matches = actual == float(shown) if places is None else round(actual, places) == float(shown)
        return [] if matches else [f"{path}: shown {shown.text}, answered {actual!r}"]
    if isinstance(shown, bool) or shown is None:
        return [] if actual is shown else [f"{path}: shown {json.dumps(shown)}, answered {_brief(actual)}"]
    if isinstance(shown, int):
        if isinstance(actual, bool) or not isinstance(actual, int) or actual != shown:
            return [f"{path}: shown {shown}, answered {_brief(actual)}"]
        return []
    raise TypeError(f"{path}: cannot compare a shown {type(shown).__name__}")


def _brief(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."
