"""What every section of the configuration file shares: ConfigModel (StrictModel's rules, each field's docstring as
its description) and the constrained strings several sections use (Ident, FilterName, EnvName). Apart so that each
section's module builds on it without importing another section's.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from es_provider.core.acl import Filter
from es_provider.core.strictjson import StrictModel

Ident = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]
# Enum members are given as their names (strings), so this one field is validated leniently.
FilterName = Annotated[Filter, Field(strict=False)]
EnvName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class ConfigModel(StrictModel):
    """The configuration file's models: StrictModel's rules, and each field's docstring is its description
    (docs/configuration.md is generated from them by offline/reference.py). TOML can write `nan` and `inf`: no
    setting means either (a NaN score mapping answered `"score": null` and no threshold filtered), so every float
    refuses them at start, naming its key."""

    model_config = ConfigDict(use_attribute_docstrings=True, allow_inf_nan=False)
