"""Pure: what differs between OpenSearch and Elasticsearch, as translations of the bodies the rest of the service
writes in OpenSearch's words. Only the Engine (base, indices, reads) uses this module, so nothing else learns which
engine answers.

- Which engine: `GET /` — OpenSearch says `version.distribution: "opensearch"`, Elasticsearch does not.
- Vectors: OpenSearch's `knn_vector` field and `index.knn` setting → Elasticsearch's `dense_vector` (indexed, cosine
  similarity, HNSW with the same m and ef_construction); no index setting.
- The kNN query: `{"knn": {field: {"vector", "k", "filter"}}}` → `{"knn": {"field", "query_vector",
  "num_candidates", "filter"}}`. Both engines score cosine as (1 + cos) / 2, so calibration reads the same scale.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

Engine = Literal["opensearch", "elasticsearch"]


@dataclass(frozen=True, slots=True)
class Flavor:
    engine: Engine
    version: str

    @property
    def release(self) -> tuple[int, int]:
        """(major, minor) of the version; a part that is not a number counts as 0."""
        parts = [int(p) if p.isdigit() else 0 for p in self.version.split(".")[:2]] + [0, 0]
        return parts[0], parts[1]

    @property
    def major(self) -> int:
        return self.release[0]

    def at_least(self, major: int, minor: int = 0) -> bool:
        return self.release >= (major, minor)

    @property
    def elastic(self) -> bool:
        return self.engine == "elasticsearch"

    def __str__(self) -> str:
        return f"{'Elasticsearch' if self.elastic else 'OpenSearch'} {self.version}"


OPENSEARCH = Flavor("opensearch", "2")


class UnsupportedEngine(ValueError):
    """A node this service cannot serve from; the message says what it is and what is needed."""


def detect(root: dict[str, Any]) -> Flavor:
    """The engine behind a `GET /` answer. Elasticsearch before 8 has no kNN query and no dense_vector HNSW: refused."""
    found = root.get("version")
    version: dict[str, Any] = found if isinstance(found, dict) else {}
    number = str(version.get("number", ""))
    if version.get("distribution") == "opensearch":
        return Flavor("opensearch", number)
    flavor = Flavor("elasticsearch", number)
    if flavor.major < 8:
        raise UnsupportedEngine(f"Elasticsearch {number or '(no version)'} answered; version 8 or later is needed")
    return flavor


def index_body(body: dict[str, Any], flavor: Flavor) -> dict[str, Any]:
    """An index body (settings + mappings) in `flavor`'s words."""
    if not flavor.elastic:
        return body
    out = copy.deepcopy(body)
    index = out.setdefault("settings", {}).setdefault("index", {})
    index.pop("knn", None)  # OpenSearch's switch for vector indices; Elasticsearch knows no such setting
    properties = out.get("mappings", {}).get("properties", {})
    out.setdefault("mappings", {})["properties"] = mapping_properties(properties, flavor)
    if flavor.at_least(9, 1) and any(f.get("type") == "knn_vector" for f in properties.values()
                                     if isinstance(f, dict)):
        # Elasticsearch 9 leaves vectors out of _source by default; a reindex copies _source, so keep them.
        index["mapping.exclude_source_vectors"] = False
    return out


def mapping_properties(properties: dict[str, Any], flavor: Flavor) -> dict[str, Any]:
    """Field mappings in `flavor`'s words (put-mapping bodies as well as index bodies)."""
    if not flavor.elastic:
        return properties
    return {name: _dense_vector(field) if isinstance(field, dict) and field.get("type") == "knn_vector" else field
            for name, field in properties.items()}


def _dense_vector(field: dict[str, Any]) -> dict[str, Any]:
    method = field.get("method") or {}
    if method.get("space_type", "cosinesimil") != "cosinesimil":
        raise UnsupportedEngine(f"vector space {method.get('space_type')!r} has no Elasticsearch translation here")
    parameters = method.get("parameters") or {}
    dense: dict[str, Any] = {"type": "dense_vector", "dims": field["dimension"], "index": True,
                             "similarity": "cosine"}
    options = {k: parameters[k] for k in ("m", "ef_construction") if k in parameters}
    if options:
        dense["index_options"] = {"type": "hnsw", **options}
    return dense


def search_body(body: dict[str, Any], flavor: Flavor) -> dict[str, Any]:
    """A search body in `flavor`'s words: every OpenSearch kNN clause, wherever it sits, in Elasticsearch's form.
    The body is copied only where it changes (a BM25 search passes through untouched)."""
    if not flavor.elastic:
        return body
    translated = _knn_clauses(body)
    return translated if isinstance(translated, dict) else body


def _knn_clauses(node: Any) -> Any:
    if isinstance(node, list):
        return [_knn_clauses(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "knn" and isinstance(value, dict) and len(value) == 1:
            (field, spec), = value.items()
            if isinstance(spec, dict) and "vector" in spec:
                knn: dict[str, Any] = {"field": field, "query_vector": spec["vector"],
                                       "num_candidates": spec.get("k", 10)}
                if "filter" in spec:
                    knn["filter"] = _knn_clauses(spec["filter"])
                out[key] = knn
                continue
        out[key] = _knn_clauses(value)
    return out
