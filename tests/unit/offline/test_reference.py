"""docs/configuration.md is what es_provider/offline/reference.py prints from the settings models: a field added,
a default or a limit changed, a docstring reworded — and the page is regenerated (`make config-reference`)."""

from __future__ import annotations

from pathlib import Path

from es_provider.config.audit import AccessLogSettings
from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.identity import DirectorySettings, ScimSettings
from es_provider.config.knowledge import Calibration, EmbedderSettings, KnowledgeBase, ScoringSettings
from es_provider.config.model import ConfigModel
from es_provider.config.serving import ApiKey, ServerSettings, WorkbenchSettings
from es_provider.config.settings import Settings
from es_provider.offline.reference import reference

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
MODELS = (Settings, OpenSearchSettings, ServerSettings, WorkbenchSettings, DirectorySettings, ScimSettings,
          AccessLogSettings, ScoringSettings, Calibration, EmbedderSettings, KnowledgeBase, ApiKey)


def test_the_page_is_up_to_date_with_the_models() -> None:
    assert PAGE.read_text(encoding="utf-8") == reference(), (
        "docs/configuration.md is out of date: run `make config-reference`")


def test_every_field_of_every_section_has_a_description_and_a_row() -> None:
    page = reference()
    for model in MODELS:
        assert issubclass(model, ConfigModel)
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
            if model is not Settings:
                assert f"| `{field.alias or name}` |" in page, f"{model.__name__}.{name} is not in the reference"


def test_a_section_shows_type_default_constraints_and_cross_field_rules() -> None:
    page = reference()
    assert ("| `max_body_bytes` | integer | `65536` | ≥ 1024, ≤ 16777216 | A larger body is refused with 413" in page)
    assert '| `replay_store` | `"engine"` \\| `"memory"` | `"engine"` | — |' in page
    assert "| `versions` | list of string | **required** | at least 1 item, each 1–128 characters |" in page
    assert "## `[access_log]`" in page and "- the \"file\" sink needs directory" in page
    assert "- knowledge … names unknown embedder …" in page  # an f-string's message, its values left out


def test_the_descriptions_come_from_the_models_and_strictness_is_kept() -> None:
    assert ServerSettings.model_fields["body_timeout_s"].description == (
        "A body must arrive whole within this time; a slower sender is cut off (408) and counted.")
    config = ServerSettings.model_config
    assert (config["extra"], config["strict"], config["frozen"]) == ("forbid", True, True)
