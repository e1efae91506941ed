"""scim/principals_import.py's pure parts: the file's users read line by line (a bad line, or a subject given
twice, names its line), the member removals a PATCH sends, and the run's one-line summary."""

from __future__ import annotations

import pytest

from es_provider.scim.principals_import import ImportError_, Summary, UserLine, _removals, parse_lines


def test_the_files_users_blank_lines_skipped() -> None:
    lines = [b'{"subject": "u-a", "groups": ["eng"]}', b"  \n", b'{"subject": "u-b", "active": false, "display_name": "B"}']
    assert parse_lines(lines, "users.jsonl") == [UserLine(subject="u-a", groups=["eng"]),
                                                 UserLine(subject="u-b", active=False, display_name="B")]


@pytest.mark.parametrize(("lines", "error"), [
    ([b'{"subject": "u-a"}', b'{"subject": "u-a"}'], "users.jsonl:2: subject 'u-a' already given on line 1"),
    ([b'{"subject": ""}'], "users.jsonl:1: invalid fields: subject"),
    ([b'{"subject": "u", "extra": 1}'], "users.jsonl:1: invalid fields: extra"),
    ([b'{"subject": "u", "active": "yes"}'], "users.jsonl:1: invalid fields: active"),  # strict: no "yes" → True
    ([b'{"subject": "u", "groups": [""]}'], "users.jsonl:1: invalid fields: groups.0"),
    ([b'{"subject": "u", "subject": "v"}'], "users.jsonl:1: has a duplicate key 'subject'"),
    ([b"", b"not json"], "users.jsonl:2: is not a single valid JSON document"),
])
def test_a_bad_line_is_named(lines: list[bytes], error: str) -> None:
    with pytest.raises(ImportError_) as caught:
        parse_lines(lines, "users.jsonl")
    assert str(caught.value) == error


@pytest.mark.parametrize(("members", "operations"), [
    ([], []),
    (["b", "a"], [{"op": "remove", "path": 'members[value eq "a"]'},
                  {"op": "remove", "path": 'members[value eq "b"]'}]),
])
def test_members_are_removed_one_filtered_path_each_in_order(members: list[str],
                                                             operations: list[dict[str, str]]) -> None:
    assert _removals(members) == operations


def test_the_summary_line() -> None:
    summary = Summary(users_created=2, users_updated=1, groups_deleted=1, unchanged=3)
    assert summary.line() == ("users: 2 created, 1 updated, 0 deleted; groups: 0 created, 0 updated, 1 deleted; "
                              "3 user(s) unchanged")
