"""Command-line paths → documents: JSON Lines records as they are, other files through readers.py with the
tenant, ACL and metadata given on the command line. Directories are walked without following symbolic links and
without entering hidden folders; what is left out is counted and named (never skipped silently)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
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


SYMLINK = "symbolic link"  # never followed: a link in a folder can point anywhere (link.txt → ~/secret.env)
HIDDEN = "hidden"  # a name starting with `.`; a hidden folder is skipped whole (.git, .venv, .env files)
SPECIAL = "special file"  # not a regular file: a FIFO would block the read, a device never end


@dataclass(frozen=True, slots=True)
class Skipped:
    name: str  # relative to the folder given; a folder ends with `/`
    why: str  # SYMLINK, HIDDEN or SPECIAL


@dataclass
class Walk:
    files: list[tuple[Path, str]] = field(default_factory=list)  # (file, document id)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)  # folders that cannot be listed


def walk(root: Path) -> Walk:
    """A folder's regular files in path order, each with its document id (the path relative to `root`), and what
    was left out and why. Neither file nor folder links are followed; hidden files and folders are left out."""
    found = Walk()
    pending = [root]  # a stack, not recursion: folders may nest deeper than Python's recursion limit
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            found.errors.append(RecordError(str(folder), f"cannot list folder: {exc.strerror}"))
            continue
        for entry in entries:
            path = Path(entry.path)
            name = path.relative_to(root).as_posix()
            is_folder = entry.is_dir(follow_symlinks=False)
            if entry.is_symlink():
                found.skipped.append(Skipped(name, SYMLINK))
            elif entry.name.startswith("."):
                found.skipped.append(Skipped(name + "/" if is_folder else name, HIDDEN))
            elif is_folder:
                pending.append(path)
            elif entry.is_file(follow_symlinks=False):
                found.files.append((path, name))
            else:
                found.skipped.append(Skipped(name, SPECIAL))
    found.files.sort(key=lambda item: PurePosixPath(item[1]).parts)  # path order, whatever order folders came in
    found.skipped.sort(key=lambda item: PurePosixPath(item.name).parts)
    return found


def skipped_line(skipped: Sequence[Skipped], *, names: int = 5) -> str | None:
    """`skipped: 1 symbolic link (link.txt), 2 hidden (.env, .git/)`: counts by reason, the first few names."""
    if not skipped:
        return None
    counts = Counter(s.why for s in skipped)
    parts = []
    for why in (SYMLINK, HIDDEN, SPECIAL):
        if not counts[why]:
            continue
        listed = [s.name for s in skipped if s.why == why]
        shown = ", ".join(listed[:names]) + (f", … {len(listed) - names} more" if len(listed) > names else "")
        noun = why if why == HIDDEN or counts[why] == 1 else f"{why}s"
        parts.append(f"{counts[why]} {noun} ({shown})")
    return "skipped: " + ", ".join(parts)


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
    return SourceDocument(record, tuple(sections), origin=str(file))


@dataclass
class Collected:
    items: list[SourceDocument | RecordError] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _given(name: str) -> Walk | RecordError:
    """The files of one command-line path. A path that is itself a symbolic link is refused, as inside folders
    (a shell glob such as docs/* would otherwise follow the links it matches); a hidden path named on the command
    line is read: the operator asked for it."""
    path = Path(name)
    if path.is_symlink():
        return RecordError(name, "is a symbolic link, not followed (give the path it points to)")
    if not path.exists():
        return RecordError(name, "no such file or directory")
    if path.is_dir():
        return walk(path)
    if not path.is_file():
        return RecordError(name, f"not a regular file ({SPECIAL})")
    return Walk(files=[(path, path.name)])


def collect(paths: list[str], defaults: FileDefaults) -> Collected:
    collected = Collected()
    for name in paths:
        given = _given(name)
        if isinstance(given, RecordError):
            collected.items.append(given)
            continue
        collected.items.extend(given.errors)
        collected.skipped.extend(given.skipped)
        for file, document_id in given.files:
            if file.suffix.lower() == ".jsonl":
                collected.items.extend(read_jsonl(file))
                continue
            try:
                collected.items.append(from_file(file, document_id, defaults))
            except ReadError as exc:
                collected.items.append(RecordError(str(file), str(exc)))
    return collected
