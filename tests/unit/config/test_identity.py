"""config/identity.py: [directory] and [scim]: their bounds, and an enabled SCIM service never without its token."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.identity import DirectorySettings, ScimSettings


@pytest.mark.parametrize(("fields", "wrong"), [
    ({}, None),
    ({"enabled": True, "index": "corp-principals_2"}, None),
    ({"index": "Principals"}, "index"),  # an engine index name is lower case
    ({"index": "-principals"}, "index"),
    ({"poll_interval_s": 0}, "poll_interval_s"),
    ({"poll_interval_s": 61}, "poll_interval_s"),
    ({"max_staleness_s": 3601}, "max_staleness_s"),
    ({"cache_max_age_s": 0}, "cache_max_age_s"),
])
def test_directory_bounds(fields: dict[str, Any], wrong: str | None) -> None:
    if wrong is None:
        DirectorySettings.model_validate(fields, strict=False)
        return
    with pytest.raises(ValidationError) as refused:
        DirectorySettings.model_validate(fields, strict=False)
    assert refused.value.errors()[0]["loc"] == (wrong,)


@pytest.mark.parametrize(("fields", "said"), [
    ({}, None),
    ({"token_ref": "SCIM_TOKEN"}, None),  # named, not yet enabled
    ({"enabled": True, "token_ref": "SCIM_TOKEN", "subject_attribute": "externalId"}, None),
    ({"enabled": True}, "an enabled [scim] needs token_ref"),
    ({"enabled": True, "token_ref": "SCIM_TOKEN", "subject_attribute": "email"}, "subject_attribute"),
    ({"token_ref": "not a name"}, "token_ref"),
])
def test_scim_needs_its_own_token_when_enabled(fields: dict[str, Any], said: str | None) -> None:
    if said is None:
        ScimSettings.model_validate(fields, strict=False)
        return
    with pytest.raises(ValidationError, match=said.replace("[", r"\[")):
        ScimSettings.model_validate(fields, strict=False)
