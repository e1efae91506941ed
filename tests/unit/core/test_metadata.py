from __future__ import annotations

import pytest

from es_provider.core.metadata import MATCH_ALL, MATCH_NONE, Condition, ConditionError, costly, parse, translate_one

TYPES = {"category": "keyword", "year": "double", "flag": "boolean", "when": "date"}


@pytest.mark.parametrize(
    ("name", "op", "value", "clause"),
    [
        ("category", "contains", "a*b", {"wildcard": {"metadata.category": {"value": "*a\\*b*"}}}),
        ("category", "start with", "sp", {"prefix": {"metadata.category": "sp"}}),
        ("category", "end with", "c?", {"wildcard": {"metadata.category": {"value": "*c\\?"}}}),
        ("category", "is", "spec", {"term": {"metadata.category": "spec"}}),
        ("category", "is", 5.0, {"term": {"metadata.category": "5"}}),
        ("year", "is", "2025", {"term": {"metadata.year": 2025.0}}),
        ("year", "is", "abc", MATCH_NONE),
        ("flag", "is", "TRUE", {"term": {"metadata.flag": True}}),
        ("year", "=", 2025.0, {"term": {"metadata.year": 2025.0}}),
        ("year", ">", 1.0, {"range": {"metadata.year": {"gt": 1.0}}}),
        ("year", "≤", 1.0, {"range": {"metadata.year": {"lte": 1.0}}}),
        ("year", "before", 10.0, {"range": {"metadata.year": {"lt": 10.0}}}),
        ("when", "after", 10.0, {"range": {"metadata.when": {"gt": 10, "format": "epoch_second"}}}),
        ("when", ">", 10.0, MATCH_NONE),
        ("category", ">", 1.0, MATCH_NONE),
        ("year", "contains", "2", MATCH_NONE),
        ("category", "in", ("a", "b"), {"terms": {"metadata.category": ["a", "b"]}}),
        ("year", "in", ("1", "x"), {"terms": {"metadata.year": [1.0]}}),
        ("year", "in", ("x",), MATCH_NONE),
        ("missing", "is", "x", MATCH_NONE),
        ("missing", "not empty", None, MATCH_NONE),
        ("missing", "is not", "x", MATCH_NONE),
        ("missing", "empty", None, MATCH_ALL),
        ("year", "not empty", None, {"exists": {"field": "metadata.year"}}),
        ("category", "in", (), MATCH_NONE),  # in []: matches nothing
        ("category", "not in", (), MATCH_ALL),  # not in []: excludes nothing
        ("missing", "not in", (), MATCH_ALL),
        ("category", "is not", "x", {"bool": {"filter": [{"exists": {"field": "metadata.category"}}],
                                              "must_not": [{"term": {"metadata.category": "x"}}]}}),
        # "empty" is absent or null, as in Dify's own knowledge bases: "" is a value.
        ("category", "empty", None, {"bool": {"must_not": [{"exists": {"field": "metadata.category"}}]}}),
    ],
)
def test_translate_one(name: str, op: str, value: object, clause: dict) -> None:
    assert translate_one(Condition(name, op, value), TYPES) == clause


@pytest.mark.parametrize(
    ("conditions", "error"),
    [
        ([{"name": "a", "comparison_operator": "like", "value": "x"}], "'like' is not supported"),
        ([{"name": "a", "comparison_operator": ">", "value": "x"}], "number"),
        ([{"name": "a", "comparison_operator": ">", "value": float("inf")}], "finite"),
        ([{"name": "", "comparison_operator": "is", "value": "x"}], "name"),
        ([{"name": "a*", "comparison_operator": "is", "value": "x"}], "name"),
        ([{"name": ".a", "comparison_operator": "is", "value": "x"}], "name"),
        (["not an object"], "object"),
        ([{"name": "a", "comparison_operator": "is", "value": "x"}] * 101, "more than 100"),
        # A JSON integer no double holds: 400, whatever the key's mapped type (was a 503 and an OverflowError).
        ([{"name": "a", "comparison_operator": "is", "value": 10**400}], "finite"),
        ([{"name": "a", "comparison_operator": "=", "value": 10**400}], "finite"),
        ([{"name": "a", "comparison_operator": "in", "value": [1, 10**400]}], "finite"),
        # The engine's cost of patterns is bounded per request (was 100 x 128 characters, 2.5 s of engine CPU).
        ([{"name": "a", "comparison_operator": "start with", "value": "x"}] * 17, "more than 16 pattern"),
        ([{"name": "a", "comparison_operator": "contains", "value": "x"}] * 5, "more than 4 contains"),
        ([{"name": "a", "comparison_operator": "contains", "value": "中" * 128}] * 2, "512 UTF-8 bytes"),
        ([{"name": "a", "comparison_operator": "end with", "value": "😀" * 100},
          {"name": "b", "comparison_operator": "not contains", "value": "😀" * 29}], "512 UTF-8 bytes"),
    ],
)
def test_parse_refuses(conditions: list, error: str) -> None:
    with pytest.raises(ConditionError, match=error):
        parse("and", conditions)


def test_parse_normalises() -> None:
    parsed = parse(None, [{"name": "tags", "comparison_operator": "in", "value": "a, b,,c"},
                          {"name": "n", "comparison_operator": "≥", "value": "3"}])
    assert parsed is not None and parsed.logical_operator == "and"
    assert [c.value for c in parsed.conditions] == [("a", "b", "c"), 3.0]
    assert parse("or", None) is None and parse(None, []) is None


SPEC = {"name": "category", "comparison_operator": "is", "value": "spec"}


@pytest.mark.parametrize(
    ("blank", "kept"),
    [
        ({"name": "owner", "comparison_operator": "is", "value": None}, 1),  # a value left empty: left out
        ({"name": "owner", "comparison_operator": "contains", "value": None}, 1),
        ({"name": "year", "comparison_operator": "≥", "value": None}, 1),
        ({"name": "when", "comparison_operator": "before", "value": None}, 1),
        ({"name": "tags", "comparison_operator": "in", "value": None}, 1),
        ({"name": "owner", "comparison_operator": "empty", "value": None}, 2),  # takes no value: kept
        ({"name": "owner", "comparison_operator": "not empty"}, 2),
        ({"name": "tags", "comparison_operator": "in", "value": []}, 2),  # kept: matches nothing
        ({"name": "tags", "comparison_operator": "not in", "value": ""}, 2),  # kept: excludes nothing
        ({"name": ["owner"], "comparison_operator": "is", "value": "hr"}, 2),  # name as a one-element list
    ],
)
def test_blank_values_as_dify_treats_them(blank: dict, kept: int) -> None:
    for logical in ("and", "or", None):
        parsed = parse(logical, [SPEC, blank])
        assert parsed is not None and len(parsed.conditions) == kept


def test_only_blank_conditions_impose_nothing() -> None:
    assert parse("and", [{"name": "a", "comparison_operator": "is", "value": None}]) is None
    assert parse(None, None) is None


@pytest.mark.parametrize(
    "condition",
    [
        {"name": ["a", "b"], "comparison_operator": "is", "value": "x"},
        {"name": [], "comparison_operator": "is", "value": "x"},
        {"name": "a", "comparison_operator": "is", "value": ["x"]},
        {"name": "a", "comparison_operator": "nope", "value": None},  # blank does not excuse a bad operator
        {"name": "a*", "comparison_operator": "is", "value": None},
    ],
)
def test_malformed_conditions_stay_errors(condition: dict) -> None:
    with pytest.raises(ConditionError):
        parse("and", [condition])


@pytest.mark.parametrize(
    "conditions",
    [
        [{"name": "a", "comparison_operator": "contains", "value": "😀" * 128}],  # the longest value alone: 512 bytes
        [{"name": "a", "comparison_operator": "contains", "value": "x" * 128}] * 4,
        [{"name": "a", "comparison_operator": "end with", "value": "x" * 32}] * 4
        + [{"name": "a", "comparison_operator": "start with", "value": "x" * 128}] * 12,
        [{"name": "a", "comparison_operator": "start with", "value": "😀" * 128}] * 16,  # prefixes are cheap
        [{"name": "a", "comparison_operator": "is", "value": 10**300}],
    ],
)
def test_parse_accepts_what_fits_the_budget(conditions: list) -> None:
    assert parse("or", conditions) is not None


# Hardening finding 3: metadata values are bounded before the engine sees them.
@pytest.mark.parametrize(
    ("operator", "value", "ok"),
    [
        ("contains", "x" * 128, True), ("contains", "x" * 129, False), ("contains", "中" * 400, False),
        ("not contains", "x" * 129, False), ("start with", "\U00020000" * 129, False), ("end with", "y" * 129, False),
        ("start with", "\U00020000" * 128, True),
        ("is", "x" * 1024, True), ("is", "x" * 1025, False), ("is not", "x" * 1025, False),
        ("in", ["x" * 1024, "y"], True), ("in", ["x" * 1025], False), ("not in", ",".join(["v"] * 1000), True),
        ("in", [str(i) for i in range(1001)], False),
    ],
)
def test_metadata_values_are_bounded(operator, value, ok) -> None:
    conditions = [{"name": "k", "comparison_operator": operator, "value": value}]
    if ok:
        assert parse("and", conditions) is not None
    else:
        with pytest.raises(ConditionError, match="at most"):
            parse("and", conditions)


# Leading-wildcard patterns are costly: such searches take turns (edge/admission.py).
@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([{"name": "a", "comparison_operator": "contains", "value": "x"}], True),
        ([{"name": "a", "comparison_operator": "end with", "value": "x"}], True),
        ([{"name": "a", "comparison_operator": "not contains", "value": "x"}], True),
        ([{"name": "a", "comparison_operator": "start with", "value": "x"}], False),
        ([{"name": "a", "comparison_operator": "is", "value": "x"}], False),
        ([{"name": "a", "comparison_operator": "contains", "value": None}], False),  # left out: blank value
    ],
)
def test_which_conditions_are_costly(conditions: list, expected: bool) -> None:
    assert costly(parse("and", conditions)) is expected
