"""Every benchmark section at a tiny size on made-up data (`python -m bench.run --smoke`, `python -m bench.house
--smoke`): each runs and writes its result's shape, and the page renders from them. Nothing about speed is asserted;
a section that no longer runs fails here the day it breaks, not at the next `make bench`.

Both runs go side by side against the session's node, each with index names of its own (BENCH_PREFIX), removed
afterwards. What a smoke run leaves out, and why, is in docs/development.md ("Running the benchmarks")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each section's result file and the top-level keys its report section reads (bench/report.md.j2).
SHAPES = {
    "ingest": {"chunks", "rounds", "ours_median", "naive_median", "ratio", "target_ratio", "settings"},
    "quality": {"ndcg_at_10", "recall_at_100", "queries", "target_ndcg_at_10", "implementation", "settings"},
    "latency": {"levels", "rounds", "targets", "uvloop", "settings"},
    "acl": {"service_filters_on", "service_filters_off", "direct_filters_on", "direct_filters_off",
            "service_p50_cost", "direct_p50_cost", "target_p50_cost", "settings"},
    "semantic": {"modes", "embedding", "ingest_with_embeddings", "target_hybrid_ndcg_at_10", "settings"},
    "relevance": {"sets", "vector_sets", "targets", "ingest", "calibration_fitted"},
    "hotpath": {"rounds", "chunks_per_s", "median_chunks_per_s", "ours_vs_raw", "mapping", "embedding", "settings"},
    "workers": {"direct c32", "workers 1 c32", "workers 2 c32", "floor: aiohttp forwarder c32",
                "floor: asyncio + httptools forwarder c32", "signed, engine store c1", "signed, memory store c32"},
    "scale": {"levels", "rounds", "service_p50_growth", "target_service_p50_growth", "settings"},
    "engines": {"engines", "rounds", "target_ndcg_difference", "settings"},
    "identities": {"modes", "store_over_file", "cache_miss", "after_counter_move", "import", "store_users", "settings"},
    "access": {"modes", "on_over_off", "sink", "records_metrics", "requests_to_the_on_service", "settings"},
    # Without the sampled table ("sampled"): py-spy is in requirements-bench.lock, which `make test` does not install.
    "stages": {"stages_us", "accounted_us", "service_cpu_us", "aiohttp_forwarder_floor_us", "reading", "settings"},
    "rerank": {"model", "choice", "candidates", "sets", "latency", "calibration_fitted", "ingest"},
    "connections": {"rounds", "modes", "over_plain"},
    "existing": {"documents", "direct", "service", "cost", "scores_service_wide", "scores_own", "fitted"},
    "traces": {"rounds", "modes", "over_off"},
    "mcp": {"rounds", "top_k", "levels", "token_check_us", "target_ratio", "settings"},
}
HOUSE = {"before", "rounds", "sparktide c32", "dify c32"}
SECONDS = 600  # far above the minutes they take: a run that hangs fails, it does not stop the suite


def _measured() -> dict[Path, int]:
    """What a measuring run writes (bench/results, docs/benchmarks.md, docs/img), with when each was last written."""
    paths = [*(ROOT / "bench" / "results").glob("*"), ROOT / "docs" / "benchmarks.md", *(ROOT / "docs" / "img").glob("*")]
    return {path: path.stat().st_mtime_ns for path in paths if path.exists()}


def _indices(url: str, prefix: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/_cat/indices/{prefix}-*?h=index&expand_wildcards=all", timeout=30) as answer:
        return answer.read().decode().split()


@pytest.fixture(scope="module")
def smoked(opensearch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Both smoke runs, side by side: their results folders ("run", "house")."""
    folder = tmp_path_factory.mktemp("bench-smoke")
    measured = _measured()
    prefixes = {name: f"smoke-{name}-{uuid.uuid4().hex[:8]}" for name in ("run", "house")}
    running = {}
    for name, module in (("run", "bench.run"), ("house", "bench.house")):
        log = (folder / f"{name}.log").open("w")
        running[name] = (subprocess.Popen(
            [sys.executable, "-m", module, "--smoke", "--url", opensearch.url, "--results", str(folder / name)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "BENCH_PREFIX": prefixes[name], "TMPDIR": str(folder)}), log)  # its work folders here
    try:
        for name, (process, log) in running.items():
            try:
                code = process.wait(SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            log.close()
            if code != 0:
                pytest.fail(f"bench {name} --smoke failed ({code}):\n{(folder / f'{name}.log').read_text()[-6000:]}")
        assert _measured() == measured, "a smoke run wrote where a measuring run writes"
        yield {name: folder / name for name in running}
    finally:
        for process, log in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
        for prefix in prefixes.values():
            for index in _indices(opensearch.url, prefix):
                urllib.request.urlopen(urllib.request.Request(f"{opensearch.url}/{index}", method="DELETE"), timeout=30)


@pytest.mark.parametrize("section", list(SHAPES))
def test_each_section_writes_its_result(smoked: dict[str, Path], section: str) -> None:
    found = json.loads((smoked["run"] / f"{section}.json").read_text(encoding="utf-8"))
    assert SHAPES[section] | {"machine"} <= set(found)


def test_the_page_renders_from_them(smoked: dict[str, Path]) -> None:
    page = (smoked["run"] / "benchmarks.md").read_text(encoding="utf-8")
    headings = [line.split(".")[0] for line in page.splitlines() if line.startswith("## ")]
    assert headings == [f"## {n}" for n in range(1, 19)]


def test_the_house_compares_the_checkout_with_itself(smoked: dict[str, Path]) -> None:
    found = json.loads((smoked["house"] / "house.json").read_text(encoding="utf-8"))
    assert HOUSE | {"machine"} <= set(found)
    assert found["before"].startswith("HEAD")
