"""tests/helpers/doc_walk.py: how the docs' commands and their shown answers are read, and the rule a shown answer is
held to (elisions, precision, exactness), table by table; and that every request the docs show the demo is in a
walk-through tests/integration/test_docs_answers.py runs (issue 53, item 1)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers import doc_walk
from helpers.doc_walk import Block, mismatches, parse_shown

ROOT = Path(__file__).resolve().parents[2]

# (shown, actual, matches?)
COMPARED: list[tuple[str, Any, bool]] = [
    ('{"a": 1, "b": "x"}', {"b": "x", "a": 1}, True),  # key order is not compared
    ('{"a": 1}', {"a": 1, "b": 2}, False),  # a key answered and not shown
    ('{"a": 1, ...}', {"a": 1, "b": 2}, True),
    ('{"a": 1, …}', {"a": 1, "b": 2}, True),
    ('{"a": 1, ...}', {"b": 2}, False),  # a shown key missing
    ('{"a": 1}', [1], False),
    ("[1, 2]", [1, 2], True),
    ("[1, 2]", [1, 2, 3], False),  # exactly the items shown
    ("[1, 2]", [2, 1], False),  # in order
    ("[1, ...]", [1, 2, 3], True),
    ("[1, ...]", [1], False),  # an elision stands for something
    ("[2, ...]", [1, 2], False),  # the shown items come first
    ("[1, 2, ...]", [1], False),
    ("[...]", [], False),
    ("[...]", [1], True),
    ('["第一章 总则。…"]', ["第一章 总则。本规范适用于项目现场的设备安装工作。"], True),
    ('["Customers can track the installation date online. ..."]', ["Customers can track the installation date online. More."], True),
    ('["Customers can track the installation date online. ..."]', ["Customers can track the installation date online."], False),
    ('{"a": 1, ...}', {"a": 1}, False),
    ('["..."]', [""], False),
    ('["第一章 总则。…"]', ["第二章 安装位置。"], False),
    ('["..."]', ["anything at all"], True),  # a string that is only an elision
    ('["..."]', [5], False),  # ... but a string
    ('["exact"]', ["exact text"], False),
    ("[0.639]", [0.6394], True),  # to the shown precision
    ("[0.639]", [0.6386], True),
    ("[0.639]", [0.6384], False),
    ("[0.639]", [0.745], False),
    ("[0.630]", [0.63], True),  # trailing zeros are precision too
    ("[0.630]", [0.6304], True),
    ("[0.630]", [0.6306], False),
    ("[0.63]", [0.6306], True),
    ("[1.0]", [1], True),
    ("[2025]", [2025], True),
    ("[2025]", [2025.0], False),  # an integer shown is an integer
    ("[2025]", [2026], False),
    ("[2025]", ["2025"], False),
    ("[true]", [1], False),
    ("[1]", [True], False),
    ("[null]", [None], True),
    ("[null]", [0], False),
    ("[0.5]", [None], False),
    ('{"items": [{"id": "a", "score": 0.5, ...}, ...], "total": 2}',
     {"total": 2, "items": [{"id": "a", "score": 0.4999, "x": 1}, {"id": "b"}]}, True),
    ('{"items": [{"id": "a", "score": 0.5, ...}, ...], "total": 2}',
     {"total": 3, "items": [{"id": "a", "score": 0.4999, "x": 1}, {"id": "b"}]}, False),
]


@pytest.mark.parametrize(("shown", "actual", "matches"), COMPARED)
def test_comparison(shown: str, actual: Any, matches: bool) -> None:
    found = mismatches(parse_shown(shown), actual)
    assert (found == []) is matches, found


@pytest.mark.parametrize("shown", [
    "[1, ..., 3]",  # an elision mid-list would hide what follows it
    '["a … b"]',  # and mid-string
    '["a ... b ..."]',
])
def test_an_elision_that_would_hide_what_follows_it_is_refused(shown: str) -> None:
    with pytest.raises(ValueError, match="elision"):
        mismatches(parse_shown(shown), ["a … b", 1, 2, 3])


def test_a_mismatch_names_its_path() -> None:
    assert mismatches(parse_shown('{"items": [{"score": 0.639}]}'), {"items": [{"score": 0.745}]}) == [
        "$.items[0].score: shown 0.639, answered 0.745"]


def test_an_elision_inside_a_string_value_is_not_an_elision_of_the_json() -> None:
    assert parse_shown('{"a": "x ... y", "b": "…"}') == {"a": "x ... y", "b": "…"}


CURL = """curl -s http://127.0.0.1:8080/retrieval \\
  -H 'Authorization: Bearer k' \\
  -d '{"query":"a",
       "deadline":'$(($(date +%s%3N)+5000))',"x":{}}'
# {"records":[{"score":0.366,
#   "title":"t"}, ...]}

# a comment that is no answer
make run     # it's a trailing comment with an apostrophe
make test    # and its continuation comment, no answer:
             # then more
export A="it's \\"quoted\\"" B=2"""


def test_shell_commands_continue_over_backslashes_and_open_quotes_and_carry_their_comment_answers() -> None:
    found = doc_walk.shell_examples(Block("bash", CURL, 10, ""))
    assert [e.command.split()[0:2] for e in found] == [["curl", "-s"], ["make", "run"], ["make", "test"],
                                                       ["export", 'A="it\'s']]
    curl = found[0]
    assert curl.line == 10 and curl.command.endswith("\"x\":{}}'") and curl.command.count("\n") == 3
    assert curl.answer_line == 14
    assert parse_shown(curl.answer or "") == {"records": [{"score": 0.366, "title": "t"}, doc_walk.ELIDED]}
    assert [e.answer for e in found[1:]] == [None, None, None]
    assert [e.line for e in found] == [10, 18, 19, 21]


MARKDOWN = """# Page

## Walk

Run `es-provider manifest --kb x` and see:

```json
{"mode": "REMOTE"}
```

```bash
curl -s http://127.0.0.1:8080/a
```

Answer:

```json
{"a": 1}
```

A record looks like this (no command: not an answer):

```json
{"document_id": "x"}
```

```toml
# ## not a heading
```

### A sub-section is in the section

```bash
es-provider kb create --kb x
```

## Next

```bash
never
```
"""


def test_examples_pair_json_blocks_with_the_command_they_answer() -> None:
    found = doc_walk.examples(MARKDOWN, "Walk")
    assert [(e.command, e.answer) for e in found] == [
        ("es-provider manifest --kb x", '{"mode": "REMOTE"}'),
        ("curl -s http://127.0.0.1:8080/a", '{"a": 1}'),
        ("es-provider kb create --kb x", None),
    ]
    assert [(e.line, e.answer_line) for e in found] == [(7, 8), (12, 18), (34, None)]
    assert len(doc_walk.examples(MARKDOWN)) == 4


def test_a_command_with_two_answers_is_refused() -> None:
    with pytest.raises(ValueError, match="second answer"):
        doc_walk.examples("```bash\ncurl x\n# {\"a\": 1}\n```\n\n```json\n{\"a\": 1}\n```\n")


def test_an_unknown_heading_is_refused() -> None:
    with pytest.raises(ValueError, match="no heading"):
        doc_walk.section(MARKDOWN, "Nowhere")


# Requests to the demo's port that the doc test does not run, and why.
NOT_THE_DEMO = {
    "docs/kubernetes.md": "the readyz of a Helm release through kubectl port-forward, not the demo",
}
WALKS = {"README.md": "A 5-minute tour", "docs/platforms.md": None}  # tests/integration/test_docs_answers.py


def test_every_request_to_the_demo_is_in_a_walk_the_doc_test_runs() -> None:
    """A curl to 127.0.0.1:8080 added to any page outside the walks (or a walk moved) fails here until the doc test
    runs it or NOT_THE_DEMO says why not."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        name = str(path.relative_to(ROOT))
        text = path.read_text(encoding="utf-8")
        shown = [e for e in doc_walk.examples(text) if re.search(r"\bcurl\b.*127\.0\.0\.1:8080", e.command)]
        if name in WALKS:
            walked = doc_walk.examples(text, WALKS[name])
            assert shown and all(e in walked for e in shown), name
        else:
            assert not shown or name in NOT_THE_DEMO, f"{name} shows a request to the demo no test runs"
