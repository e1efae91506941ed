"""The TOML configuration file (docs/protocols.md §3) → one validated, immutable settings object.

Secrets are not read here: the file only names the environment variables that hold them (see auth.py).
The sections' models are in serving, knowledge, identity and audit (their common base in model); Settings ties
them together with the checks across sections.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from es_provider.config.audit import AccessLogSettings
from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.identity import DirectorySettings, ScimSettings
from es_provider.config.knowledge import (
    EmbedderSettings,
    KnowledgeBase,
    RerankSettings,
    RetrievalMode,
    ScoringSettings,
)
from es_provider.config.mcp import McpSettings
from es_provider.config.model import ConfigModel, Ident
from es_provider.config.serving import ApiKey, ServerSettings, WorkbenchSettings


class Settings(ConfigModel):
    """The whole file."""

    opensearch: OpenSearchSettings = OpenSearchSettings()
    """The engine."""
    server: ServerSettings = ServerSettings()
    """The HTTP service."""
    workbench: WorkbenchSettings = WorkbenchSettings()
    """The operators' page at /workbench."""
    directory: DirectorySettings = DirectorySettings()
    """The live principal store."""
    scim: ScimSettings = ScimSettings()
    """SCIM 2.0 for the organisation's identity provider."""
    access_log: AccessLogSettings = AccessLogSettings()
    """Who was served what."""
    scoring: ScoringSettings = ScoringSettings()
    """Score calibration."""
    embedders: dict[Ident, EmbedderSettings] = Field(default_factory=dict)
    """Embedding models, by name (`[embedders.<name>]`)."""
    rerank: RerankSettings | None = None
    """A rerank stage for some knowledge bases (none by default)."""
    knowledge: list[KnowledgeBase] = Field(default_factory=list)
    """The knowledge bases (`[[knowledge]]`, one table each)."""
    api_keys: list[ApiKey] = Field(default_factory=list)
    """The AgentArts and Dify callers' keys (`[[api_keys]]`, one table each)."""
    mcp: McpSettings = McpSettings()
    """The MCP endpoint for every agent, with each user's own sign-in token."""
    principals: dict[str, list[str]] = Field(default_factory=dict)
    """Subject → its groups (`"u-alice" = ["eng"]`), for the subjects the principal store does not know."""

    @model_validator(mode="after")
    def _references(self) -> Settings:
        ids = [kb.id for kb in self.knowledge]
        if len(set(ids)) != len(ids):
            raise ValueError("knowledge ids must be unique")
        known = set(ids)
        for kb in self.knowledge:
            if kb.embedder is not None and kb.embedder not in self.embedders:
                raise ValueError(f"knowledge {kb.id!r} names unknown embedder {kb.embedder!r}")
        for kb_id in self.rerank.knowledge if self.rerank is not None else ():
            if kb_id not in known:
                raise ValueError(f"rerank.knowledge names unknown knowledge base {kb_id!r}")
        for i, key in enumerate(self.api_keys):
            for kb_id in key.knowledge:
                if kb_id not in known:
                    raise ValueError(f"api_keys[{i}].knowledge names unknown knowledge base {kb_id!r}")
        for kb_id in self.mcp.knowledge if self.mcp.enabled else ():
            if kb_id not in known:
                raise ValueError(f"mcp.knowledge names unknown knowledge base {kb_id!r}")
        platform_refs = {kb.secret_ref for kb in self.knowledge} | {key.key_ref for key in self.api_keys}
        if self.workbench.key_ref is not None and self.workbench.key_ref in platform_refs:
            raise ValueError("workbench.key_ref must be its own credential, not a platform's secret or API key")
        if self.scim.token_ref is not None and self.scim.token_ref in platform_refs | {self.workbench.key_ref}:
            raise ValueError("scim.token_ref must be its own credential, not a platform's secret, an API key or the "
                             "workbench key")
        for issuer in self.mcp.issuers if self.mcp.enabled else ():
            ref = issuer.client_secret_ref
            if ref is not None and ref in platform_refs | {self.workbench.key_ref, self.scim.token_ref}:
                raise ValueError("mcp.issuers client_secret_ref must be its own secret, not a platform's secret, an "
                                 "API key, the workbench key or the SCIM token")
        view = self.access_log.view_key_ref
        if view is not None and view in platform_refs | {self.workbench.key_ref, self.scim.token_ref}:
            raise ValueError("access_log.view_key_ref must be its own credential, not a platform's secret, an API "
                             "key, the workbench key or the SCIM token")
        return self

    def uses_directory(self) -> bool:
        """Whether subjects' groups come from the principal store (as well as `[principals]`)."""
        return self.directory.enabled or self.scim.enabled

    def knowledge_base(self, kb_id: str) -> KnowledgeBase | None:
        return next((kb for kb in self.knowledge if kb.id == kb_id), None)

    def reranks(self, kb_ids: set[str], mode: RetrievalMode) -> bool:
        """Whether a search of these knowledge bases in this mode goes through the rerank stage."""
        r = self.rerank
        return r is not None and mode in r.modes and bool(kb_ids) and kb_ids <= set(r.knowledge)

    def needs_knn(self) -> bool:
        return any(kb.embedder is not None for kb in self.knowledge)

    def shares_replays(self) -> bool:
        """Whether signed callbacks' first uses are kept in the engine (some knowledge base requires signatures)."""
        return self.server.replay_store == "engine" and any(kb.signature for kb in self.knowledge)


class ConfigError(Exception):
    """The configuration file is missing or invalid; the message names the offending key."""


def _format(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"{where}: {item['msg']}")
    return "; ".join(lines)


def _env_url(env: Mapping[str, str]) -> str | None:
    """`OPENSEARCH_URL`, or the file `OPENSEARCH_URL_FILE` names, as the other secrets are read."""
    if env.get("OPENSEARCH_URL"):
        return env["OPENSEARCH_URL"]
    if env.get("OPENSEARCH_URL_FILE"):
        try:
            return Path(env["OPENSEARCH_URL_FILE"]).read_text(encoding="utf-8").strip() or None
        except OSError:
            raise ConfigError("the file named by OPENSEARCH_URL_FILE cannot be read") from None
    return None


def parse_settings(text: str, environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None
    url = _env_url(env)
    if url:
        raw.setdefault("opensearch", {})["url"] = url
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format(exc)) from None


def load_settings(path: str | Path, environ: Mapping[str, str] | None = None) -> Settings:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    return parse_settings(text, environ)
