"""Pure: Dify metadata conditions (docs/protocols.md, Dify) → one OpenSearch filter clause on `metadata.<name>`.

Parsing checks names, operators and value types (a wrong one is the caller's error). Blank values are treated as
Dify treats them for its own knowledge bases (a user left the value empty, or a workflow variable resolved to
nothing): a condition whose value is null is left out (`empty` / `not empty` take no value), `in` an empty list
matches nothing, `not in` an empty list excludes nothing. Translation takes the index's mapped type of each
metadata key, so every clause fits its field: a key that no chunk carries, or whose type cannot answer the
operator, matches nothing (`empty` matches everything). `empty` is "absent or null", as in Dify (`""` is a value).
Negative operators (`is not`, `not contains`, `not in`, `≠`) match only chunks that carry the key, as in SQL.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Clause = dict[str, Any]
MATCH_NONE: Clause = {"match_none": {}}
MATCH_ALL: Clause = {"match_all": {}}
MAX_CONDITIONS = 100
# Bounds on condition values, checked before the engine is asked (so a valid condition never fails there, and the
# answer is the same whether or not any chunk carries the key). Pattern operators become automata on the engine's
# side, whose size grows with the value's UTF-8 length: at 128 characters every plane passed (300 random values on
# OpenSearch 2.19); `contains` failed from about 315 ASCII characters, `start with` from 256 four-byte ones.
MAX_PATTERN_CHARS = 128
# A leading-wildcard pattern (`contains`, `not contains`, `end with`) makes the engine build an automaton and run it
# over the field's whole term dictionary, before any timeout or cancellation can act: 100 such conditions of 128
# four-byte characters cost OpenSearch 2.5 s of CPU for any key. Each costs ~6 ms plus ~0.035 ms a byte on 5,000
# distinct values here (OpenSearch and Elasticsearch alike), so a request's patterns share one budget: at most 4
# leading-wildcard conditions holding at most 512 UTF-8 bytes in all (one longest value fits; the costliest
# admitted request costs ~70 ms there, docs/reliability.md §11), and at most 16 pattern conditions (prefixes are
# cheap: 12 of 128 four-byte characters cost ~10 ms).
MAX_PATTERN_CONDITIONS = 16
MAX_WILDCARD_CONDITIONS = 4
MAX_PATTERN_BYTES = 512
LEADING_WILDCARD_OPS = ("contains", "not contains", "end with")
MAX_TERM_CHARS = 1024  # is / is not / in / not in: plain term lookups
MAX_SET_VALUES = 1000

STRING_OPS = ("contains", "not contains", "start with", "end with")
EQUALITY_OPS = ("is", "is not")
PRESENCE_OPS = ("empty", "not empty")
SET_OPS = ("in", "not in")
COMPARE_OPS = ("=", "≠", ">", "<", "≥", "≤")
TIME_OPS = ("before", "after")
OPERATORS = (*STRING_OPS, *EQUALITY_OPS, *PRESENCE_OPS, *SET_OPS, *COMPARE_OPS, *TIME_OPS)

NUMERIC_TYPES = frozenset(
    {"double", "float", "half_float", "scaled_float", "long", "integer", "short", "byte", "unsigned_long"}
)
_NAME = re.compile(r"^[^*?.\s][^*?]{0,255}$")


class ConditionError(ValueError):
    """A condition the caller got wrong; the message names it (never a stored value)."""


@dataclass(frozen=True, slots=True)
class Condition:
    name: str
    operator: str
    value: Any


@dataclass(frozen=True, slots=True)
class Conditions:
    logical_operator: Literal["and", "or"]
    conditions: tuple[Condition, ...]


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise ConditionError(f"{where}: value must be a number")
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # a JSON integer beyond a double (400 nines)
            raise ConditionError(f"{where}: value must be a finite number") from None
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ConditionError(f"{where}: value must be a number") from None
    else:
        raise ConditionError(f"{where}: value must be a number")
    if not math.isfinite(number):
        raise ConditionError(f"{where}: value must be a finite number")
    return number


def _scalar(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool))


def _checked_scalar(value: Any, operator: str, where: str) -> Any:
    """A string or number for a term operator; an integer no double can hold is refused here, whatever the key's
    mapped type (so the answer does not depend on other tenants' chunks)."""
    if not _scalar(value):
        raise ConditionError(f"{where}: '{operator}' needs a string or number value")
    if isinstance(value, int):
        _number(value, where)
    return _bounded(value, MAX_TERM_CHARS, operator, where)


def _bounded(value: Any, limit: int, operator: str, where: str) -> Any:
    if isinstance(value, str) and len(value) > limit:
        raise ConditionError(f"{where}: '{operator}' takes a value of at most {limit} characters")
    return value


def _check_value(operator: str, value: Any, where: str) -> Any:
    if operator in STRING_OPS:
        if not isinstance(value, str):
            raise ConditionError(f"{where}: '{operator}' needs a string value")
        return _bounded(value, MAX_PATTERN_CHARS, operator, where)
    if operator in EQUALITY_OPS:
        return _checked_scalar(value, operator, where)
    if operator in PRESENCE_OPS:
        return None
    if operator in SET_OPS:
        if isinstance(value, str):
            values = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, list) and all(_scalar(v) for v in value):
            values = list(value)
        else:
            raise ConditionError(f"{where}: '{operator}' needs a list or a comma-separated string")
        if len(values) > MAX_SET_VALUES:
            raise ConditionError(f"{where}: '{operator}' takes at most {MAX_SET_VALUES} values")
        return tuple(_checked_scalar(v, operator, where) for v in values)
    # comparisons and times
    return _number(value, where)


def condition_name(raw: Mapping[str, Any]) -> Any:
    """A condition's `name`: a string, or (as older Dify clients and docs send it) a one-element list of one."""
    name = raw.get("name")
    if isinstance(name, list) and len(name) == 1:
        return name[0]
    return name


def parse_one(raw: Any, where: str) -> Condition | None:
    """One condition, or None when its value is blank (null) and the operator needs one: Dify leaves such a
    condition out rather than failing the request."""
    if not isinstance(raw, Mapping):
        raise ConditionError(f"{where} must be an object")
    name = condition_name(raw)
    operator = raw.get("comparison_operator")
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name or name.endswith("."):
        raise ConditionError(f"{where}.name is not a valid metadata key")
    if operator not in OPERATORS:
        raise ConditionError(f"{where}.comparison_operator {str(operator)[:40]!r} is not supported")
    value = raw.get("value")
    if value is None and operator not in PRESENCE_OPS:
        return None
    return Condition(name, operator, _check_value(operator, value, where))


def check_logical_operator(logical_operator: str | None) -> Literal["and", "or"]:
    if logical_operator not in (None, "and", "or"):
        raise ConditionError("metadata_condition.logical_operator must be 'and' or 'or'")
    return "or" if logical_operator == "or" else "and"


def parse(logical_operator: str | None, conditions: list[Any] | None) -> Conditions | None:
    """Validates Dify's metadata_condition; None when it imposes nothing (no conditions, or only blank ones)."""
    combined = check_logical_operator(logical_operator)
    if not conditions:
        return None
    if len(conditions) > MAX_CONDITIONS:
        raise ConditionError(f"metadata_condition has more than {MAX_CONDITIONS} conditions")
    parsed = [parse_one(raw, f"metadata_condition.conditions[{i}]") for i, raw in enumerate(conditions)]
    kept = tuple(c for c in parsed if c is not None)
    check_pattern_budget(kept)
    return Conditions(combined, kept) if kept else None


def costly(conditions: Conditions | None) -> bool:
    """Whether the engine pays dearly for these conditions: they hold a leading-wildcard pattern."""
    return conditions is not None and any(c.operator in LEADING_WILDCARD_OPS for c in conditions.conditions)


def check_pattern_budget(conditions: tuple[Condition, ...]) -> None:
    """The engine's cost of a request's patterns, bounded before it is asked (MAX_PATTERN_CONDITIONS/BYTES)."""
    patterns = [c for c in conditions if c.operator in STRING_OPS]
    if len(patterns) > MAX_PATTERN_CONDITIONS:
        raise ConditionError(f"metadata_condition has more than {MAX_PATTERN_CONDITIONS} pattern conditions "
                             f"({', '.join(STRING_OPS)})")
    wildcards = [c for c in patterns if c.operator in LEADING_WILDCARD_OPS]
    if len(wildcards) > MAX_WILDCARD_CONDITIONS:
        raise ConditionError(f"metadata_condition has more than {MAX_WILDCARD_CONDITIONS} "
                             f"{', '.join(LEADING_WILDCARD_OPS)} conditions")
    wildcard_bytes = sum(len(c.value.encode("utf-8", "surrogatepass")) for c in wildcards)
    if wildcard_bytes > MAX_PATTERN_BYTES:
        raise ConditionError(f"metadata_condition's {', '.join(LEADING_WILDCARD_OPS)} values exceed "
                             f"{MAX_PATTERN_BYTES} UTF-8 bytes in all")


def _escape_wildcard(text: str) -> str:
    return re.sub(r"([\\*?])", r"\\\1", text)


def _field_value(kind: str | None, value: Any) -> Any | None:
    """`value` as the field's type stores it, or None when no chunk could hold it."""
    if kind == "keyword":
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)
    if kind in NUMERIC_TYPES:
        try:
            return _number(value, "")
        except ConditionError:
            return None
    if kind == "boolean":
        text = str(value).strip().lower()
        return {"true": True, "false": False}.get(text)
    return None


def _present(field: str) -> Clause:
    return {"exists": {"field": field}}


def _carries_but_not(field: str, clause: Clause) -> Clause:
    return {"bool": {"filter": [_present(field)], "must_not": [clause]}}


def _equals(field: str, kind: str | None, value: Any) -> Clause:
    stored = _field_value(kind, value)
    return MATCH_NONE if stored is None else {"term": {field: stored}}


def translate_one(condition: Condition, types: Mapping[str, str]) -> Clause:
    field = f"metadata.{condition.name}"
    kind = types.get(condition.name)
    op, value = condition.operator, condition.value
    if op in SET_OPS and not value:
        return MATCH_NONE if op == "in" else MATCH_ALL  # in []: nothing; not in []: excludes nothing
    if kind is None:
        return MATCH_ALL if op == "empty" else MATCH_NONE
    if op in PRESENCE_OPS:
        # A null value is not indexed, so "absent or null" is "no indexed value".
        return {"bool": {"must_not": [_present(field)]}} if op == "empty" else _present(field)
    if op in STRING_OPS:
        if kind != "keyword":
            return MATCH_NONE
        escaped = _escape_wildcard(value)
        positive: Clause = {
            "contains": {"wildcard": {field: {"value": f"*{escaped}*"}}},
            "not contains": {"wildcard": {field: {"value": f"*{escaped}*"}}},
            "start with": {"prefix": {field: value}},
            "end with": {"wildcard": {field: {"value": f"*{escaped}"}}},
        }[op]
        return _carries_but_not(field, positive) if op == "not contains" else positive
    if op in ("is", "="):
        return _equals(field, kind, value)
    if op in ("is not", "≠"):
        return _carries_but_not(field, _equals(field, kind, value))
    if op in SET_OPS:
        stored = [v for v in (_field_value(kind, item) for item in value) if v is not None]
        positive = {"terms": {field: stored}} if stored else MATCH_NONE
        return positive if op == "in" else _carries_but_not(field, positive)
    # >, <, ≥, ≤, before, after: numbers (Unix seconds for times) on numeric fields, or date fields.
    bound = {">": "gt", "<": "lt", "≥": "gte", "≤": "lte", "before": "lt", "after": "gt"}[op]
    if kind in NUMERIC_TYPES:
        return {"range": {field: {bound: value}}}
    if kind == "date" and op in TIME_OPS:
        return {"range": {field: {bound: int(value), "format": "epoch_second"}}}
    return MATCH_NONE


def translate(conditions: Conditions, types: Mapping[str, str]) -> Clause:
    clauses = [translate_one(c, types) for c in conditions.conditions]
    if conditions.logical_operator == "or":
        return {"bool": {"should": clauses, "minimum_should_match": 1}}
    return {"bool": {"filter": clauses}}
