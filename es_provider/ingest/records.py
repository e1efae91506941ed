"""The JSON Lines ingest record (docs/protocols.md §9): one document per line."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from es_provider.core.markup import strip_markup
from es_provider.core.strictjson import StrictJsonError, loads_object

Key = Annotated[str, Field(min_length=1, max_length=512)]


class Page(BaseModel):
    model_config = ConfigDict(extra="forbid")
    page: int = Field(ge=1, le=1_000_000)
    content: str


class SourceRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["DOCUMENT", "URL", "INLINE"] = "DOCUMENT"
    id: Annotated[str, Field(max_length=128)] | None = None
    version: Annotated[str, Field(max_length=128)] | None = None
    uri: Annotated[str, Field(max_length=2048)] | None = None


class AclRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subjects: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    groups: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)
    public: bool = False


class DocumentRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    document_id: Key
    title: Annotated[str, Field(max_length=512)] | None = None
    content: str | None = None
    pages: list[Page] | None = None
    source: SourceRef = Field(default_factory=SourceRef)
    tenant_id: Annotated[str, Field(max_length=128)] | None = None
    acl: AclRecord = Field(default_factory=AclRecord)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_body(self) -> DocumentRecord:
        if (self.content is None) == (self.pages is None):
            raise ValueError("exactly one of content and pages is required")
        return self

    @property
    def version(self) -> str:
        return self.source.version or "1"


@dataclass(frozen=True, slots=True)
class Section:
    """A stretch of a document that no chunk crosses: a PDF page, a heading's section, or the whole text."""

    text: str
    page: int | None = None
    heading: str | None = None


@dataclass(frozen=True, slots=True)
class SourceDocument:
    record: DocumentRecord
    sections: tuple[Section, ...]
    cleaned: bool = False  # markup residue was removed from its title or text (markup.py)
    origin: str = ""  # where it came from, for messages: `file.jsonl:3`, `docs/a.md`

    @classmethod
    def of(cls, record: DocumentRecord, origin: str = "") -> SourceDocument:
        """A JSON Lines record as its sections, markup residue (`<br>`, `<ref …>`) removed from text and title."""
        pages: list[tuple[str, int | None]] = (
            [(p.content, p.page) for p in record.pages] if record.pages is not None else [(record.content or "", None)]
        )
        sections = tuple(Section(text=strip_markup(text), page=page) for text, page in pages)
        title = strip_markup(record.title) if record.title else record.title
        cleaned = title != record.title or any(s.text != text for s, (text, _) in zip(sections, pages, strict=True))
        if title != record.title:
            record = record.model_copy(update={"title": title})
        return cls(record, sections, cleaned, origin)


class RecordError(ValueError):
    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


def parse_record(line: bytes | str, where: str) -> DocumentRecord:
    try:
        data = loads_object(line)
    except StrictJsonError as exc:
        # Duplicate keys included: `"tenant_id": "team-b", …, "tenant_id": ""` must not quietly pick one.
        raise RecordError(where, f"record {exc}") from None
    try:
        return DocumentRecord.model_validate(data)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in e["loc"]) or "(record)" for e in exc.errors()})
        raise RecordError(where, f"invalid fields: {', '.join(fields)}") from None


def read_jsonl(path: Path) -> Iterator[SourceDocument | RecordError]:
    """Records of a JSON Lines file; a bad line is yielded as a RecordError (reported, never silently skipped)."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                where = f"{path}:{number}"
                try:
                    yield SourceDocument.of(parse_record(line, where), origin=where)
                except RecordError as exc:
                    yield exc
