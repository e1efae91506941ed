"""core/presets.py: each tool's layout is named by its key and keeps no permissions of its own (Elastic's
connectors excepted: their document-level security), and what the start log says once about a preset's uri."""

from __future__ import annotations

import pytest

from es_provider.core.presets import PRESETS, uri_note

ANSWERED = "is answered, on every protocol, only where it holds an http(s) URL"


def test_each_preset_is_named_by_its_key() -> None:
    assert all(preset.name == name for name, preset in PRESETS.items())


@pytest.mark.parametrize("name", sorted(set(PRESETS) - {"es-provider"}))
def test_a_tools_layout_keeps_no_permissions_of_its_own(name: str) -> None:
    preset = PRESETS[name]
    assert (preset.tenant, preset.subjects, preset.groups, preset.public) == (None, None, None, None)
    assert preset.principals == ("_allow_access_control.enum" if name == "elastic-connectors" else None)


URI_NOTES = {
    "es-provider": None,  # its own index: uri is its own field
    "custom": None,  # no uri named
    "haystack": None,
    "elastic-connectors": f"source uri from url {ANSWERED}",
    "bedrock": f"source uri from x-amz-bedrock-kb-source-uri {ANSWERED}",
    "langchain": f"source uri from metadata.source {ANSWERED} (LangChain's loaders put file paths there; a path is "
                 "left out)",
    "llamaindex": f"source uri from metadata.file_path {ANSWERED} (LlamaIndex's readers put file paths there; a "
                  "path is left out)",
}


@pytest.mark.parametrize(("name", "note"), URI_NOTES.items())
def test_what_is_said_once_about_a_presets_uri(name: str, note: str | None) -> None:
    assert uri_note(PRESETS[name]) == note


def test_every_preset_has_its_uri_line_above() -> None:
    assert set(URI_NOTES) == set(PRESETS)
