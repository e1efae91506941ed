"""docs/cluster.md's least-privilege roles are what engine/privileges.py renders: a privilege added or reworded and
the page is regenerated (`make cluster-roles`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from es_provider.engine import privileges

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"


def test_the_pages_roles_are_the_generated_ones() -> None:
    page = PAGE.read_text(encoding="utf-8")
    start, end = page.index(privileges.BEGIN), page.index(privileges.END) + len(privileges.END)
    assert page[start:end] == privileges.doc_block(), "docs/cluster.md is out of date: run `make cluster-roles`"


def test_the_pages_roles_yml_block_is_the_roles() -> None:
    block = privileges.doc_block()
    roles = yaml.safe_load(block.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert roles == {privileges.role_name(duty): privileges.opensearch_role(duty) for duty in privileges.Duty}


def test_splicing_replaces_only_the_block() -> None:
    page = f"before\n{privileges.BEGIN}\nold\n{privileges.END}\nafter\n"
    assert privileges.spliced(page, "NEW") == "before\nNEW\nafter\n"
