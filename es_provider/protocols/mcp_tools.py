"""Pure: the MCP endpoint's tools (docs/mcp.md) — their definitions (the SDK's `mcp_types.Tool`, each read-only,
with input and output schemas), their arguments → neutral search requests, and results → tool results.

`search` and `fetch` are shaped as ChatGPT's connectors and deep research call them; `retrieve` answers cited chunks
as the other protocols do; `list_knowledge_bases` the bases this user may search. A failure is a tool result with
`isError: true` naming the protocol code, never an empty list. A document the user may not read and one that does
not exist answer the same bytes but for the id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import quote

import mcp_types
import orjson
from pydantic import BaseModel, ConfigDict, Field

from es_provider.config.knowledge import KnowledgeBase
from es_provider.core.acl import Filter, Filters, Identity
from es_provider.core.errors import KnowledgeError
from es_provider.search.domain import Chunk, SearchRequest

SEARCH_RESULTS = 10  # `search`'s results (ChatGPT shows a handful; deep research fetches the ones it wants)
MAX_TOP_K = 20
FETCH_CHARS = 100_000  # `fetch`'s text at most; the metadata says when it was cut
NOT_FOUND = "KNOWLEDGE_NOT_FOUND"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Query = Annotated[str, Field(min_length=1, max_length=4096, description="What to look for, in natural language.")]


class SearchArgs(_Args):
    query: Query


class FetchArgs(_Args):
    id: Annotated[str, Field(min_length=1, max_length=2048, description="A result id that `search` answered.")]


class RetrieveArgs(_Args):
    query: Query
    knowledge_bases: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        default=None, max_length=32, description="Knowledge base ids to search (list_knowledge_bases); all if unset.")
    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] | None = Field(
        default=None, description=f"How many chunks at most (default 5, at most {MAX_TOP_K}).")
    score_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=0.0, description="Only chunks scoring at least this (scores are calibrated to 0-1).")


class ListArgs(_Args):
    pass


class SearchHit(BaseModel):
    id: str
    title: str
    url: str


class SearchResults(BaseModel):
    results: list[SearchHit]


class FetchedDocument(BaseModel):
    id: str
    title: str
    text: str
    url: str
    metadata: dict[str, Any]


class Source(BaseModel):
    uri: str | None = None
    page: int | None = None
    locator: str | None = None


class RetrievedChunk(BaseModel):
    chunk_id: str
    document_id: str
    knowledge_base: str
    title: str
    content: str
    source: Source
    score: float | None = Field(description="Calibrated relevance, 0-1.")
    metadata: dict[str, Any]


class Retrieved(BaseModel):
    chunks: list[RetrievedChunk]


class KnowledgeBaseInfo(BaseModel):
    id: str
    name: str
    description: str


class KnowledgeBases(BaseModel):
    knowledge_bases: list[KnowledgeBaseInfo]


def _tool(name: str, title: str, description: str, args: type[BaseModel], output: type[BaseModel]) -> mcp_types.Tool:
    return mcp_types.Tool(name=name, title=title, description=description, input_schema=args.model_json_schema(),
                          output_schema=output.model_json_schema(),
                          annotations=mcp_types.ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                                                idempotent_hint=True, open_world_hint=False))


ARGS: dict[str, type[_Args]] = {"search": SearchArgs, "fetch": FetchArgs, "retrieve": RetrieveArgs,
                                "list_knowledge_bases": ListArgs}
TOOLS = (
    _tool("search", "Search the company's documents",
          "Searches the documents you may read and answers matching documents (id, title, url); `fetch` reads one.",
          SearchArgs, SearchResults),
    _tool("fetch", "Read one document",
          "The text of one document `search` found (the parts you may read), with its title, url and metadata.",
          FetchArgs, FetchedDocument),
    _tool("retrieve", "Retrieve cited passages",
          "The passages that best answer the query, each with its document, source (uri, page, locator) and a "
          "calibrated score from 0 to 1.", RetrieveArgs, Retrieved),
    _tool("list_knowledge_bases", "List knowledge bases", "The knowledge bases you may search.", ListArgs,
          KnowledgeBases),
)
TOOLS_LIST = {"tools": [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in TOOLS]}


def filters_for(kb: KnowledgeBase) -> Filters:
    """A user's own token names the user: SUBJECT always, the tenant unless the base is open across tenants, and
    whatever the base mandates (the same as an API key acting for an end user)."""
    return kb.key_filters(end_user=True)


def reachable(kb: KnowledgeBase, identity: Identity) -> bool:
    """Whether this user may search `kb` at all: a base whose TENANT is mandatory refuses a user without one."""
    return bool(identity.tenants) or Filter.TENANT not in kb.mandatory_filters


def search_request(kb: KnowledgeBase, identity: Identity, query: str, top_k: int,
                   score_threshold: float = 0.0) -> SearchRequest:
    return SearchRequest(knowledge=(kb,), query=query, identity=identity, filters=filters_for(kb), top_k=top_k,
                         score_threshold=score_threshold)


def merged(results: Iterable[Sequence[Chunk]], top_k: int) -> list[Chunk]:
    """Pure: several bases' chunks, best calibrated score first (ties in the given order), cut to top_k."""
    chunks = [c for result in results for c in result]
    order = sorted(range(len(chunks)), key=lambda i: (-(chunks[i].score or 0.0), i))
    return [chunks[i] for i in order][:top_k]


def document_ref(kb_id: str, document_id: str) -> str:
    """`search`'s result id: the knowledge base and the document (`fetch` reads it back)."""
    return f"{kb_id}/{document_id}"


def parse_ref(ref: str) -> tuple[str, str] | None:
    kb_id, slash, document_id = ref.partition("/")
    return (kb_id, document_id) if slash and kb_id and document_id else None


def url_of(chunk: Chunk) -> str:
    """The document's own URL where it has one; else a URN naming it (a citation, not a link)."""
    uri = chunk.source.get("uri")
    return uri if isinstance(uri, str) and uri else f"urn:es-provider:{quote(chunk.knowledge_id, safe='')}:" \
                                                    f"{quote(chunk.document_id, safe='')}"


def rerank_outcome(outcomes: Iterable[str | None]) -> str | None:
    """Pure: the `X-Rerank` of a tool that searched several bases: "applied" when every reranked search was, else
    the first fallback's reason; None when no base has a rerank stage."""
    staged = [o for o in outcomes if o is not None]
    return next((o for o in staged if o != "applied"), "applied") if staged else None


def search_results(chunks: Sequence[Chunk]) -> dict[str, Any]:
    seen: set[str] = set()
    hits = []
    for chunk in chunks:
        ref = document_ref(chunk.knowledge_id, chunk.document_id)
        if ref not in seen:
            seen.add(ref)
            hits.append({"id": ref, "title": chunk.title or chunk.document_id, "url": url_of(chunk)})
    return {"results": hits}


def fetched(ref: str, chunks: Sequence[Chunk], complete: bool) -> dict[str, Any]:
    """The document's text from its readable chunks in order, at most FETCH_CHARS (the metadata says when cut)."""
    first = chunks[0]
    text = "\n\n".join(c.content for c in chunks)
    cut = len(text) > FETCH_CHARS or not complete
    meta: dict[str, Any] = {"knowledge_base": first.knowledge_id, "document_id": first.document_id,
                            "chunks": len(chunks), "truncated": cut}
    if cut:
        meta["note"] = "the document is longer than this answer: the text stops early"
    return {"id": ref, "title": first.title or first.document_id, "text": text[:FETCH_CHARS], "url": url_of(first),
            "metadata": meta}


def retrieved(chunks: Sequence[Chunk]) -> dict[str, Any]:
    return {"chunks": [{
        "chunk_id": c.chunk_id, "document_id": c.document_id, "knowledge_base": c.knowledge_id,
        "title": c.title or c.document_id, "content": c.content,
        "source": {k: c.source[k] for k in ("uri", "page", "locator") if c.source.get(k) is not None},
        "score": c.score, "metadata": dict(c.metadata)} for c in chunks]}


def knowledge_bases(bases: Iterable[KnowledgeBase]) -> dict[str, Any]:
    return {"knowledge_bases": [{"id": kb.id, "name": kb.name, "description": kb.description} for kb in bases]}


def tool_result(structured: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's answer: the structured content, and the same JSON as text (clients that read only text)."""
    return {"content": [{"type": "text", "text": orjson.dumps(structured).decode()}],
            "structuredContent": structured, "isError": False}


def tool_error(code: str, message: str) -> dict[str, Any]:
    """A tool that failed: `isError`, the protocol's code and a message that names no value, index or secret."""
    body = {"error": {"code": code, "message": message}}
    return {"content": [{"type": "text", "text": orjson.dumps(body).decode()}], "isError": True}


def error_of(error: KnowledgeError) -> dict[str, Any]:
    return tool_error(error.code.value, error.safe_message)


NOT_FOUND_RESULT = tool_error(NOT_FOUND, "No document with this id that you may read.")
