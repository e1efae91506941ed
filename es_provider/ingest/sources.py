"""Command-line paths → documents: JSON Lines records as they are, other files through readers.py with the
tenant, ACL and metadata given on the command line. Directories are walked; nothing is skipped silently."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from es_provider.ingest.readers import ReadError, read_file
from es_provider.ingest.records import AclRecord, DocumentRecord, RecordError, SourceDocument, SourceRef, read_jsonl


@dataclass(frozen=True)
class FileDefaults:
    tenant_id: str | None = None
    subjects: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    public: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


class OptionError(ValueError):
    """A command-line option for files is invalid; the message names the option."""


_OPTION_OF = {"tenant_id": "--tenant", "subjects": "--subjects", "groups": "--groups", "metadata": "--metadata"}


def check_defaults(defaults: FileDefaults) -> None:
    """Validates the options every file will get, before any file is read (the same rules as a JSON Lines record)."""
    try:
        DocumentRecord(document_id="check", content="", tenant_id=defaults.tenant_id,
                       acl=AclRecord(subjects=list(defaults.subjects), groups=list(defaults.groups),
                                     public=defaults.public), metadata=defaults.metadata)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = str(error["loc"][0]) if error["loc"] else ""
            problems.append(f"{_OPTION_OF.get(where, where or 'options')}: {error['msg']}")
        raise OptionError("; ".join(sorted(set(problems)))) from None


def _files(path: Path) -> Iterator[tuple[Path, str]]:
    """(file, document id) pairs: a directory's files get ids relative to it, a file its own name."""
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
            yield file, file.relative_to(path).as_posix()
    else:
        yield path, path.name


def from_file(file: Path, document_id: str, defaults: FileDefaults) -> SourceDocument:
    title, sections, version = read_file(file)
    record = DocumentRecord(
        document_id=document_id,
        title=(title or file.stem)[:512],
        content="",
        source=SourceRef(type="DOCUMENT", id=document_id[:128], version=version),
        tenant_id=defaults.tenant_id,
        acl=AclRecord(subjects=list(defaults.subjects), groups=list(defaults.groups), public=defaults.public),
        metadata={**defaults.metadata, "file_name": file.name},
    )
    return SourceDocument(record, tuple(sections))


def collect(paths: list[str], defaults: FileDefaults) -> list[SourceDocument | RecordError]:
    items: list[SourceDocument | RecordError] = []
    for name in paths:
        path = Path(name)
        if not path.exists():
            items.append(RecordError(name, "no such file or directory"))
            continue
        for file, document_id in _files(path):
            if file.suffix.lower() == ".jsonl":
                items.extend(read_jsonl(file))
                continue
            try:
                items.append(from_file(file, document_id, defaults))
            except ReadError as exc:
                items.append(RecordError(str(file), str(exc)))
    return items
