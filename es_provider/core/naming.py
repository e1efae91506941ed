"""Pure: the one rule for naming a knowledge base's indices: `<alias>-v<N>`, behind the alias (admin.py makes
them; a hit's `_index` names its knowledge base by the same rule)."""

from __future__ import annotations

import functools
import re

_VERSION_SUFFIX = re.compile(r"-v(\d+)$")


def index_name(alias: str, version: int) -> str:
    return f"{alias}-v{version}"


def index_pattern(alias: str) -> str:
    """Every version's index, as an index pattern."""
    return f"{alias}-v*"


def version_of(index: str, alias: str) -> int | None:
    """N when `index` is `<alias>-v<N>`, else None."""
    match = _VERSION_SUFFIX.search(index)
    return int(match.group(1)) if match and index[: match.start()] == alias else None


@functools.lru_cache(maxsize=1024)
def alias_of_index(index: str) -> str:
    return _VERSION_SUFFIX.sub("", index)
