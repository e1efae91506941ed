"""The best raw bulk load we know, for comparison with `es-provider ingest`: the SAME chunk documents ingest writes
(chunked beforehand, outside the timing), pre-serialised NDJSON bodies of about 5 MB, several bulk requests in
flight on the async client, refresh off during the load and one refresh at the end. Prints JSON.

    python -m bench.raw_bulk URL RECORDS INDEX CHUNK_SIZE [IN_FLIGHT] [LANGUAGES]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import orjson
from opensearchpy import AsyncOpenSearch

from es_provider.ingest.admin import load_index_body
from es_provider.ingest.chunker import DEFAULT_OVERLAP
from es_provider.ingest.records import SourceDocument, read_jsonl
from es_provider.ingest.writer import chunk_documents

BODY_BYTES = 5 * 1024 * 1024


def bodies(records: Path, index: str, size: int) -> tuple[list[bytes], int]:
    out: list[bytes] = []
    lines: list[bytes] = []
    held = chunks = 0
    for doc in read_jsonl(records):
        assert isinstance(doc, SourceDocument), doc
        for chunk in chunk_documents(doc, size=size, overlap=DEFAULT_OVERLAP):
            pair = orjson.dumps({"index": {"_index": index, "_id": chunk["chunk_id"]}}) + b"\n" + \
                orjson.dumps(chunk) + b"\n"
            lines.append(pair)
            held += len(pair)
            chunks += 1
            if held >= BODY_BYTES:
                out.append(b"".join(lines))
                lines, held = [], 0
    if lines:
        out.append(b"".join(lines))
    return out, chunks


async def load(url: str, index: str, payloads: list[bytes], in_flight: int, languages: list[str]) -> float:
    client = AsyncOpenSearch(hosts=[url], timeout=300)
    try:
        if await client.indices.exists(index=index):
            await client.indices.delete(index=index)
        body = load_index_body(languages=languages)
        body["settings"]["index"]["refresh_interval"] = "-1"
        await client.indices.create(index=index, body=body)
        queue = list(reversed(payloads))
        started = time.perf_counter()

        async def sender() -> None:
            while queue:
                payload = queue.pop()
                answer = await client.bulk(body=payload, headers={"content-type": "application/x-ndjson"})
                if answer.get("errors"):
                    raise SystemExit("bulk errors")

        await asyncio.gather(*(sender() for _ in range(in_flight)))
        await client.indices.put_settings(index=index, body={"index": {"refresh_interval": "1s"}})
        await client.indices.refresh(index=index)
        return time.perf_counter() - started
    finally:
        await client.close()


def main() -> None:
    url, records, index, size = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    in_flight = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    languages = sys.argv[6].split(",") if len(sys.argv) > 6 else ["en", "zh"]
    payloads, chunks = bodies(records, index, size)
    seconds = asyncio.run(load(url, index, payloads, in_flight, languages))
    print(json.dumps({"chunks": chunks, "seconds": seconds, "chunks_per_s": chunks / seconds, "in_flight": in_flight}))


if __name__ == "__main__":
    main()
