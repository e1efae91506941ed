"""The [access_log] section: the access record's sinks, what happens when they fail, the durable spool and the
record's keys. Apart because es_provider.audit reads it, and nothing else of the file.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.model import ConfigModel, EnvName

SinkName = Literal["index", "file"]


class AccessLogSettings(ConfigModel):
    """The access record (docs/access.md): one record per answered or refused platform request — who asked, with
    which credential, for which knowledge bases, and which documents and chunks were served — never the query text
    or any content. On by default: a security team's first question after an incident is "who was served it"."""

    enabled: bool = True
    """Keep the record."""
    sinks: list[SinkName] = Field(default_factory=lambda: ["index"], min_length=1, max_length=2)  # type: ignore[arg-type]
    """Where records go. "index": daily indices `<index>-YYYY.MM.DD` on the engine (every worker and instance
    writes there, the operator queries them with `es-provider access`); "file": daily JSON Lines files in
    `directory`; or both."""
    index: str = Field(default="es-provider-access", pattern=r"^[a-z0-9][a-z0-9_.-]{0,180}$")
    """The daily indices' prefix."""
    url: str | None = None
    """A separate cluster's URL, with no TLS or credentials settings (a shorthand for [access_log.engine] url);
    unset with no [access_log.engine]: the records go to the engine in [opensearch]."""
    engine: OpenSearchSettings | None = None
    """A separate cluster that keeps the records, described as [opensearch] is (TLS, credentials by reference)."""
    directory: str | None = None
    """The "file" sink: where `access-YYYY-MM-DD.jsonl` files are written."""
    retention_days: int = Field(default=90, ge=1, le=36500)
    """Older daily indices and files are deleted."""
    on_sink_failure: Literal["refuse", "count"] = "refuse"
    """What happens when records cannot be kept (the sink is down for longer than max_delay_s, or max_queued
    records wait): "refuse" answers 503 until it recovers (no answer goes unrecorded); "count" answers anyway and
    counts every record it drops (metric es_provider_access_records_dropped, and a log line)."""
    max_queued: int = Field(default=20_000, ge=1, le=10_000_000)
    """Records waiting in memory, per sink."""
    max_delay_s: float = Field(default=10.0, gt=0, le=3600)
    """A record waiting longer than this means the sink is down."""
    flush_interval_s: float = Field(default=1.0, gt=0, le=60)
    """A batch goes out at least this often ..."""
    batch: int = Field(default=500, ge=1, le=10_000)
    """... or once this many records wait."""
    spool: bool = True
    """The "index" sink's durable spool: records the engine has not taken after max_delay_s / 2 (a node lost, the
    day's index write-blocked or closed, our user refused) are appended to local JSON Lines files (fsync'd) instead
    of waiting in memory, and written to the engine when it takes writes again; answers are refused only when the
    spool is full or cannot be written. With it, the journal (docs/access.md): a kill -9 loses no queued record.
    Off: past max_delay_s answers are refused (on_sink_failure = "refuse"); no journal either."""
    spool_dir: str | None = None
    """Where the spool's files are (a subfolder per cluster and `index` prefix, with the key that signs its lines;
    the workers of one host share it). Unset:
    $ES_PROVIDER_CACHE/access-spool, else ~/.cache/es-provider/access-spool. Keep it on a disk that outlives the
    process (a volume in a container)."""
    spool_max_bytes: int = Field(default=512 * 1024 * 1024, ge=1024, le=1024**4)
    """The spool's size (all its files, every worker's): full, answers are refused (or, with "count", records
    dropped) as with no spool."""
    query_key_ref: EnvName | None = None
    """An environment variable holding a key: when set, records carry `query_hmac` (HMAC-SHA256 of the query under
    it), so repeats of one query can be correlated without the text."""
    view_key_ref: EnvName | None = None
    """The access view at /workbench/access ("who was served this document"): its own key, at least 16 characters
    (never a platform's secret, the workbench key or the SCIM token). Unset: no view; `es-provider access` only."""

    @model_validator(mode="after")
    def _file_needs_directory(self) -> AccessLogSettings:
        if "file" in self.sinks and not self.directory:
            raise ValueError("the \"file\" sink needs directory")
        if len(set(self.sinks)) != len(self.sinks):
            raise ValueError("sinks has duplicates")
        if self.max_delay_s < 2 * self.flush_interval_s:
            raise ValueError("max_delay_s must be at least twice flush_interval_s (records wait that long anyway)")
        if self.url is not None and self.engine is not None:
            raise ValueError("url and engine both name the records' cluster: keep engine")
        return self

    def own_engine(self) -> OpenSearchSettings | None:
        """The records' own cluster, if they have one."""
        if self.engine is not None:
            return self.engine
        return OpenSearchSettings(url=self.url) if self.url is not None else None
