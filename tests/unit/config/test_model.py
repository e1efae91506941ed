"""config/model.py: what every section of the configuration shares: its constrained names, each field's docstring
as its description, and no float that is not a finite number (TOML can write `nan` and `inf`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.model import ConfigModel, EnvName, FilterName, Ident
from es_provider.config.settings import ConfigError, load_settings
from es_provider.core.acl import Filter


class Section(ConfigModel):
    ident: Ident = "x"
    """An identifier."""
    env: EnvName = "X"
    filter: FilterName = Filter.TENANT
    number: float = 1.0


@pytest.mark.parametrize(("fields", "wrong"), [
    ({"ident": "kb-1.v2:a_b"}, None),
    ({"ident": ""}, "ident"),
    ({"ident": "a b"}, "ident"),
    ({"ident": "a" * 129}, "ident"),
    ({"env": "KB_SECRET"}, None),
    ({"env": "_x1"}, None),
    ({"env": "1KB"}, "env"),
    ({"env": "KB-SECRET"}, "env"),
    ({"filter": "SUBJECT"}, None),  # an enum member given by its name
    ({"filter": "OWNER"}, "filter"),
    ({"number": float("nan")}, "number"),
    ({"number": float("inf")}, "number"),
    ({"colour": "red"}, "colour"),  # an unknown key is refused
])
def test_the_shared_constraints(fields: dict[str, Any], wrong: str | None) -> None:
    if wrong is None:
        Section.model_validate(fields, strict=False)
        return
    with pytest.raises(ValidationError) as refused:
        Section.model_validate(fields, strict=False)
    assert refused.value.errors()[0]["loc"][0] == wrong


def test_a_fields_docstring_is_its_description() -> None:
    assert Section.model_fields["ident"].description == "An identifier."
    assert Section.model_fields["env"].description is None


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+inf"])
@pytest.mark.parametrize(("section", "key"), [
    ("scoring.bm25", "intercept"), ("scoring.vector", "relative"), ("scoring.hybrid", "lead"),
    ("scoring.bm25", "log_rank"), ("knowledge.scoring.bm25", "intercept"), ("knowledge.scoring.hybrid", "lead"),
])
def test_non_finite_score_mappings_are_refused_naming_the_key(tmp_path: Path, section: str, key: str, value: str) -> None:
    base = {"intercept": "-9.0", "log_score": "0.3", "relative": "9.0", "log_rank": "0.0", "lead": "2.0"}
    base[key] = value
    mapping = "\n".join(f"{k} = {v}" for k, v in base.items())
    knowledge = ('[[knowledge]]\nid = "k"\nname = "K"\nversions = ["1"]\nalias = "a"\nsecret_ref = "S"\n'
                 'apps = ["app"]\n')
    if section.startswith("knowledge."):
        text = f"{knowledge}[{section}]\n{mapping}\n"
    else:
        text = f"[{section}]\n{mapping}\n{knowledge}"
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert key in str(refused.value) and "finite" in str(refused.value), str(refused.value)
