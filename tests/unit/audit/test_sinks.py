"""The access record's sinks (audit/sinks.py): the index sink names its cluster as the client normalized it and
rejects a record of the wrong type itself (not its writer); the file sink writes one line per record the Python
way."""

from __future__ import annotations

from pathlib import Path

import orjson
from helpers.recording import rec, record

from es_provider.audit.sinks import FileSink, IndexSink, _storable
from es_provider.engine.connection import Connection


def test_the_index_sink_names_its_cluster_as_the_client_normalized_it() -> None:

    class Named:
        def __init__(self, url: str) -> None:
            self.connection = Connection.plain(url)

    nodes = IndexSink(Named("http://Node-A:9200/, node-b"), "rec").nodes()  # type: ignore[arg-type]
    assert nodes == ["http://node-a:9200", "http://node-b:80"]
    assert IndexSink(Named("node-b:80,http://node-a:9200"), "rec").nodes() == sorted(nodes, reverse=True)  # type: ignore[arg-type]



def test_a_record_of_the_wrong_type_is_rejected_by_the_sink_not_its_writer() -> None:
    good = rec()
    batch = [good, {"id": "x", "time": 5}, {"id": 5, "time": good["time"]}, {"time": good["time"]}, {}]
    storable, unstorable = _storable(batch)
    assert storable == [(0, good)] and [p for p, _ in unstorable] == [1, 2, 3, 4]



async def test_the_file_sink_writes_one_line_per_record_the_python_way(tmp_path: Path) -> None:

    sink = FileSink(tmp_path)
    await sink.prepare()
    records = [{**record(n), "subject": f"u{n}\u2028x\u0085y\u2029z"} for n in range(3)]
    await sink.write(records)
    (written,) = tmp_path.glob("access-*.jsonl")  # noqa: ASYNC240
    lines = written.read_text(encoding="utf-8").splitlines()
    assert [orjson.loads(line) for line in lines] == records
