"""The sections about who the subjects are: [directory] (the principal store every worker reads) and [scim] (the
identity provider's way in). Apart because they concern the subjects and their groups, not what is served or how.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from es_provider.config.model import ConfigModel, EnvName


class DirectorySettings(ConfigModel):
    """The principal store (docs/identities.md): users and groups kept in one engine index that every worker and
    instance reads, written through SCIM or `es-provider principals import`. It is authoritative for the subjects
    it knows; `[principals]` serves the others."""

    enabled: bool = False
    """Read subjects' groups from the store (on by itself when [scim] is enabled)."""
    index: str = Field(default="es-provider-principals", pattern=r"^[a-z0-9][a-z0-9_.-]{0,200}$")
    """The engine index that holds the users and groups."""
    poll_interval_s: float = Field(default=0.5, gt=0, le=60)
    """Each process reads the store's change counter this often, and forgets what it cached when it moved."""
    max_staleness_s: float = Field(default=5.0, gt=0, le=3600)
    """When the counter cannot be read for longer than this, requests that need groups fail closed (503) rather
    than be answered with groups older than this."""
    cache_max_age_s: float = Field(default=30.0, gt=0, le=86400)
    """A subject's cached groups are read again after this long whatever the counter says: the bound on a change
    whose announcement failed (the writer's answer was an error)."""


class ScimSettings(ConfigModel):
    """A SCIM 2.0 service provider under /scim/v2 (RFC 7643/7644), for the organisation's identity provider."""

    enabled: bool = False
    """Serve SCIM 2.0 at /scim/v2 (it turns the principal store on)."""
    token_ref: EnvName | None = None
    """Env var (or `<NAME>_FILE`) holding its own bearer token, at least 16 characters, never (in name or value) a
    platform's secret, an API key, the workbench key or the access view key; required when enabled. 10 wrong tokens
    a minute from one address lock it out (429 with Retry-After)."""
    subject_attribute: Literal["userName", "externalId"] = "userName"
    """Which SCIM user attribute is the platforms' subjectId (and the subject in document ACLs)."""

    @model_validator(mode="after")
    def _needs_token(self) -> ScimSettings:
        if self.enabled and self.token_ref is None:
            raise ValueError("an enabled [scim] needs token_ref (its own bearer token)")
        return self
