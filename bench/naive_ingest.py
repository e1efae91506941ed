"""The baseline a user would write: opensearch-py's `helpers.bulk` with its defaults, one process, the sync client,
the same records into a fresh index with the same mapping, one refresh at the end. Prints JSON."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opensearchpy import OpenSearch, helpers

from bench.common import PREFIX
from es_provider.ingest.admin import load_index_body

INDEX = f"{PREFIX}-naive-ingest"


def main() -> None:
    url, records = sys.argv[1], Path(sys.argv[2])
    client = OpenSearch(hosts=[url], timeout=120)
    if client.indices.exists(index=INDEX):
        client.indices.delete(index=INDEX)
    client.indices.create(index=INDEX, body=load_index_body())

    def actions() -> Iterator[dict[str, Any]]:
        with records.open(encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                yield {"_index": INDEX, "_id": record["document_id"], "_source": {
                    "chunk_id": record["document_id"], "document_id": record["document_id"],
                    "title": record["title"], "content": record["content"], "tenant_id": record["tenant_id"],
                    "acl": record["acl"], "source": record["source"]}}

    started = time.perf_counter()
    written, _ = helpers.bulk(client, actions())
    client.indices.refresh(index=INDEX)
    seconds = time.perf_counter() - started
    client.indices.delete(index=INDEX)
    print(json.dumps({"chunks": written, "seconds": seconds, "chunks_per_s": written / seconds}))


if __name__ == "__main__":
    main()
