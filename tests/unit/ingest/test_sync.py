"""The pure parts of `ingest --sync` (es_provider/ingest/sync.py): which options go together, what a scope selects,
which documents are outside it, what is removed, and how it is said."""

from __future__ import annotations

import pytest

from es_provider.ingest.ownership import LABEL_FIELD
from es_provider.ingest.records import DocumentRecord, RecordError, SourceDocument
from es_provider.ingest.sources import OptionError
from es_provider.ingest.sync import Removal, Scope, check_label, in_scope, options, read_ids, shown, to_remove


def doc(document_id: str, tenant: str | None) -> SourceDocument:
    return SourceDocument.of(DocumentRecord(document_id=document_id, content="text", tenant_id=tenant),
                             origin=f"records.jsonl:{document_id}")


@pytest.mark.parametrize(("source", "sync", "dry_run", "message"), [
    (None, True, False, "--sync needs --source LABEL"),
    ("wiki", False, True, "--dry-run lists what --sync would remove"),
    (None, False, True, "--dry-run lists what --sync would remove"),
    ("", True, False, "--source: a label is required"),
    ("  ", False, False, "--source: a label is required"),
    ("w" * 129, True, False, "--source: at most 128 characters"),
    ("wiki\n", True, False, "--source: no control characters"),
])
def test_options_that_do_not_go_together_are_refused(source, sync, dry_run, message) -> None:
    with pytest.raises(OptionError, match=message.replace("-", r"\-")):
        options(source, tenant="team-a", sync=sync, dry_run=dry_run)


def test_options_give_the_label_to_record_and_the_scope_to_mirror() -> None:
    assert options(None, tenant="team-a", sync=False, dry_run=False) == (None, None)
    assert options("wiki", tenant="team-a", sync=False, dry_run=False) == ("wiki", None)  # labelled, not mirrored
    assert options("wiki", tenant="team-a", sync=True, dry_run=True) == ("wiki", Scope("wiki", "team-a"))
    assert options("维基 docs", tenant="", sync=True, dry_run=False) == ("维基 docs", Scope("维基 docs", None))
    assert check_label("w" * 128) == "w" * 128


def test_a_scope_selects_its_tenant_or_the_chunks_without_one_and_its_label() -> None:
    assert Scope("wiki", "team-a").query() == {"bool": {
        "filter": [{"term": {LABEL_FIELD: "wiki"}}, {"term": {"tenant_id": "team-a"}}], "must_not": []}}
    assert Scope("wiki").query(["a", "b"]) == {"bool": {
        "filter": [{"term": {LABEL_FIELD: "wiki"}}, {"terms": {"document_id": ["a", "b"]}}],
        "must_not": [{"exists": {"field": "tenant_id"}}]}}
    assert Scope("wiki", "team-a").describe() == "source wiki, tenant team-a"
    assert Scope("wiki").describe() == "source wiki, no tenant"


def test_documents_of_another_tenant_are_outside_the_sync() -> None:
    error = RecordError("records.jsonl:9", "invalid fields: acl")
    items = [doc("mine", "team-a"), doc("theirs", "team-b"), doc("shared", None), error]
    kept = in_scope(items, Scope("wiki", "team-a"))
    assert kept[0] is items[0] and kept[3] is error
    assert [str(k) for k in kept[1:3]] == [
        "records.jsonl:theirs: document theirs: tenant team-b is outside this sync (source wiki, tenant team-a); "
        "not written (a sync mirrors one tenant: sync the others in runs of their own, with --tenant)",
        "records.jsonl:shared: document shared: no tenant is outside this sync (source wiki, tenant team-a); "
        "not written (a sync mirrors one tenant: sync the others in runs of their own, with --tenant)"]
    # An empty tenant id writes no tenant, as none does: such a record is in an application-shared scope.
    assert in_scope([doc("blank", "")], Scope("wiki")) == [doc("blank", "")]
    assert read_ids(kept) == {"mine"}


def test_what_is_removed_is_what_the_scope_holds_and_the_source_does_not() -> None:
    held = {"b.md": 2, "a.md": 1, "c/d.md": 3}
    assert to_remove(held, {"a.md", "new.md"}) == {"b.md": 2, "c/d.md": 3}
    assert list(to_remove(held, set())) == ["a.md", "b.md", "c/d.md"]  # in id order
    assert to_remove({}, {"a.md"}) == {}


def test_one_line_is_one_id() -> None:
    assert shown("docs/a b.md") == "docs/a b.md"
    assert shown("手册.md") == "手册.md"
    assert shown("two\nlines") == '"two\\nlines"'


def test_what_the_summary_says() -> None:
    scope = Scope("wiki", "team-a")
    done = Removal(scope, {"a.md": 2, "b\tc": 1}, deleted=3)
    assert done.line() == "sync (source wiki, tenant team-a): 2 documents no longer in the source removed (3 chunks)"
    assert done.removed_lines() == ["removed: a.md", 'removed: "b\\tc"']
    assert Removal(scope, {"a.md": 1}, deleted=1).line().endswith("1 document no longer in the source removed (1 chunk)")
    assert Removal(scope).line() == "sync (source wiki, tenant team-a): 0 documents no longer in the source removed (0 chunks)"
    planned = Removal(scope, {"a.md": 2}, dry_run=True)
    assert planned.line() == "dry run (source wiki, tenant team-a): 1 document (2 chunks) would be removed; nothing written"
    assert planned.removed_lines() == []
    withheld = Removal(scope, {"a.md": 2}, withheld="the run had 1 failure")
    assert withheld.line() == ("sync (source wiki, tenant team-a): nothing removed: the run had 1 failure "
                               "(1 document (2 chunks) of the scope not in the source)")
    assert withheld.removed_lines() == []
