"""The reserved `acting_subject` condition: how a Dify app names the end user it acts for."""

from __future__ import annotations

import pytest

from es_provider.core.acl import Filter
from es_provider.core.metadata import ConditionError
from es_provider.protocols.dify import take_acting_subject

USER = {"name": "acting_subject", "comparison_operator": "is", "value": "u-alice"}
OTHER = {"name": "category", "comparison_operator": "is", "value": "spec"}


@pytest.mark.parametrize(
    ("logical", "conditions", "user", "rest"),
    [
        ("and", [USER], "u-alice", []),
        (None, [OTHER, USER], "u-alice", [OTHER]),
        ("and", [{**USER, "name": ["acting_subject"]}], "u-alice", []),
        ("or", [OTHER], None, [OTHER]),  # no reserved condition: nothing taken
        ("and", None, None, None),
    ],
)
def test_the_end_user_is_taken_out_of_the_conditions(logical, conditions, user, rest) -> None:
    assert take_acting_subject(logical, conditions) == (user, rest)


@pytest.mark.parametrize(
    ("logical", "conditions", "error"),
    [
        ("or", [OTHER, USER], "'or'"),
        ("or", [USER], "'or'"),
        ("and", [USER, {**USER, "value": "u-bob"}], "more than once"),
        ("and", [{**USER, "comparison_operator": "contains"}], "operator 'is'"),
        ("and", [{**USER, "comparison_operator": "in", "value": ["u-alice"]}], "operator 'is'"),
        ("and", [{**USER, "value": None}], "user id"),  # a blank user never falls back to the key's own subject
        ("and", [{**USER, "value": ""}], "user id"),
        ("and", [{**USER, "value": 7}], "user id"),
        ("and", [{**USER, "value": "u" * 129}], "user id"),
    ],
)
def test_anything_that_could_make_the_user_optional_is_refused(logical, conditions, error) -> None:
    with pytest.raises(ConditionError, match=error):
        take_acting_subject(logical, conditions)


def test_naming_an_end_user_applies_subject() -> None:
    from es_provider.config.knowledge import KnowledgeBase

    kb = KnowledgeBase.model_validate({"id": "k", "name": "K", "versions": ["1"], "alias": "a", "secret_ref": "S",
                                       "apps": ["app"]}, strict=False)
    assert kb.key_filters() == (Filter.TENANT,)
    assert kb.key_filters(end_user=True) == (Filter.TENANT, Filter.SUBJECT)
