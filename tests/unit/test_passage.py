"""The passage of a whole document that answers a query (search/passage.py)."""

from __future__ import annotations

import pytest

from es_provider.search.passage import passage

FILLER = "Nothing of note happens in this sentence at all. " * 40  # 2,000 characters without the query's words
ANSWER = "The spark plugs of the engine are replaced every year. The spark gap is checked too. "
BOOK = FILLER + "\n\n" + ANSWER * 3 + "\n\n" + FILLER + "A lone spark here. " + FILLER
CJK = "天氣晴朗，無事發生。" * 300 + "颱風警報發布，颱風將於明日登陸。" + "天氣晴朗，無事發生。" * 300


@pytest.mark.parametrize(("name", "text", "query", "size", "must_hold", "starts"), [
    ("a text that fits is itself", ANSWER, "spark", 500, ANSWER, ANSWER[:10]),
    ("the densest window, from its paragraph", BOOK, "spark plugs engine", 400, "spark plugs of the engine",
     "The spark plugs"),
    ("no word matches: the start (a kNN hit)", BOOK, "kittens", 300, FILLER[:200], "Nothing of note"),
    ("CJK characters are the units", CJK, "颱風", 300, "颱風警報發布", None),
    ("case does not matter", BOOK, "SPARK PLUGS", 400, "spark plugs", "The spark plugs"),
])
def test_passage(name: str, text: str, query: str, size: int, must_hold: str, starts: str | None) -> None:
    got = passage(text, query, size)
    assert len(got) <= size, name
    assert must_hold in got, name
    if starts is not None:
        assert got.startswith(starts), (name, got[:60])


def test_a_window_ends_at_a_sentence_when_one_is_near() -> None:
    got = passage(BOOK, "spark plugs engine", 400)
    assert got.endswith("."), got[-40:]
